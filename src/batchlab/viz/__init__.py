"""batchlab.viz: the chapter-00 animation of request queues, pots (batches) and time windows:
`frames` (pure functions), `scenario` (the workload), `draw` (matplotlib), `widget` (ipywidgets).
"""

from batchlab.viz.frames import (Frame, Lane, default_horizon, frame_at, lane_from_result, lane_summary, utilization,
                                 utilization_series)
from batchlab.viz.scenario import DEMO_COST, LANE_NAMES, DemoParams, run_demo, stateless_sweep, utilization_sweep

__all__ = ["Frame", "Lane", "default_horizon", "frame_at", "lane_from_result", "lane_summary", "utilization",
           "utilization_series", "DEMO_COST", "LANE_NAMES", "DemoParams", "run_demo", "stateless_sweep",
           "utilization_sweep"]
