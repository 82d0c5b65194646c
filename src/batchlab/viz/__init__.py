"""batchlab.viz: the chapter-00 animation of request queues, pots (batches) and time windows.

* `frames` — pure functions: a `Lane` from a simulator result, the `Frame` at time t,
  utilisation (busy and fill) over time;
* `scenario` — the seeded workload served by no batching, dynamic and continuous batching;
* `draw` — matplotlib drawings of frames (still frames for headless runs);
* `widget` — the ipywidgets view: play, step, speed and parameter sliders.
"""

from batchlab.viz.frames import (Frame, Lane, default_horizon, frame_at, frame_label, frame_times,
                                 lane_from_result, lane_summary, step_index, utilization,
                                 utilization_series)
from batchlab.viz.scenario import (DEMO_COST, LANE_NAMES, DemoParams, demo_requests, run_demo,
                                   stateless_sweep, utilization_sweep)

__all__ = [
    "Frame", "Lane", "default_horizon", "frame_at", "frame_label", "frame_times", "lane_from_result",
    "lane_summary", "step_index", "utilization", "utilization_series", "DEMO_COST", "LANE_NAMES", "DemoParams",
    "demo_requests", "run_demo", "stateless_sweep", "utilization_sweep",
]
