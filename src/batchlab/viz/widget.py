"""The chapter-00 animation as an ipywidgets view (play, step, speed and parameter sliders; CSS
classes ``batchlab-…`` for the browser tests). Frames are PNGs from `batchlab.viz.draw`; a new
parameter re-runs the simulations from frame 1. Nothing blocks: the view only reacts to controls."""

import base64
from dataclasses import replace
from typing import Any

import ipywidgets as W
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from batchlab._validate import count
from batchlab.viz.draw import new_figure, render_png
from batchlab.viz.frames import default_horizon
from batchlab.viz.scenario import DemoParams, run_demo


class BatchingAnimation:
    """The animated side-by-side view of no batching, dynamic batching and continuous batching."""

    def __init__(self, params: DemoParams | None = None, n_frames: int = 60, interval_ms: int = 600) -> None:
        count("n_frames", n_frames, lo=2)
        self.params, self.n_frames = params or DemoParams(), n_frames
        self._fig: Figure | None = None
        self._cache: dict[int, str] = {}   # base64 PNG of each frame drawn
        self.play = W.Play(value=0, min=0, max=n_frames - 1, step=1, interval=interval_ms,
                           description="播放", repeat=True)
        self.slider = W.IntSlider(value=0, min=0, max=n_frames - 1, description="帧",
                                  continuous_update=True, layout=W.Layout(width="420px"))
        W.jslink((self.play, "value"), (self.slider, "value"))
        self.step_button = W.Button(description="下一帧", icon="step-forward", tooltip="前进一帧")
        self.speed = W.IntSlider(value=interval_ms, min=150, max=2000, step=50, description="每帧 ms",
                                 layout=W.Layout(width="300px"))
        self.rate = W.FloatSlider(value=self.params.rate, min=0.5, max=12.0, step=0.5, description="到达率/s",
                                  continuous_update=False)
        self.batch = W.IntSlider(value=self.params.max_batch_size, min=1, max=16, description="锅容量",
                                 continuous_update=False)
        self.delay = W.IntSlider(value=int(self.params.max_queue_delay_ms), min=0, max=1000, step=50,
                                 description="窗口 ms", continuous_update=False)
        self.label, self.picture = W.HTML(value=""), W.HTML(value="")
        for widget, cls in zip((self.play, self.step_button, self.picture, self.label, self.slider, self.speed,
                                self.rate, self.batch, self.delay),
                               ("play", "step", "frame", "frame-label", "frame-slider", "speed", "rate", "batch", "delay")):
            widget.add_class(f"batchlab-{cls}")
        self.step_button.on_click(lambda _b: self.step())
        self.slider.observe(lambda ch: self.show_frame(ch["new"]), names="value")
        self.speed.observe(lambda ch: setattr(self.play, "interval", int(ch["new"])), names="value")
        for w in (self.rate, self.batch, self.delay):
            w.observe(self._params_changed, names="value")
        self.box = W.VBox([W.HBox([self.play, self.step_button, self.slider]), W.HBox([self.speed, self.rate]),
                           W.HBox([self.batch, self.delay]), self.label, self.picture])
        self._simulate()
        self.show_frame(0)

    def _simulate(self) -> None:
        self.lanes = run_demo(self.params)
        self.horizon = default_horizon(self.lanes)
        self.times = np.linspace(0.0, self.horizon, self.n_frames)
        self._cache.clear()

    def _params_changed(self, _change: Any) -> None:
        self.params = replace(self.params, rate=float(self.rate.value), max_batch_size=int(self.batch.value),
                              max_queue_delay_ms=float(self.delay.value))
        self._simulate()
        if self.slider.value == 0:
            self.show_frame(0)
        self.slider.value = 0  # from another frame, the observer draws frame 0

    @property
    def index(self) -> int:   # the frame shown now, from 0
        return int(self.slider.value)

    def step(self, n: int = 1) -> int:
        """Advance ``n`` frames (wrapping at the end); return the new index."""
        self.slider.value = (self.index + n) % self.n_frames  # the observer redraws
        return self.index

    def show_frame(self, index: int) -> None:
        """Draw frame ``index`` into the picture and update the label."""
        index = int(index)
        if not 0 <= index < self.n_frames:
            raise ValueError(f"frame index must lie in [0, {self.n_frames - 1}], got {index}")
        t = float(self.times[index])
        if index not in self._cache:
            if self._fig is None:
                self._fig = new_figure(len(self.lanes))
                plt.close(self._fig)  # never shown by the inline backend; we draw it ourselves
            png = render_png(self.lanes, t, self.horizon, fig=self._fig)
            self._cache[index] = base64.b64encode(png).decode("ascii")
        self.picture.value = (f'<img alt="frame {index + 1}" style="max-width:100%" '
                              f'src="data:image/png;base64,{self._cache[index]}"/>')
        self.label.value = f"第 {index + 1} / {self.n_frames} 帧 · t = {t:.2f} s"

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = self.box._repr_mimebundle_(include=include, exclude=exclude) or {}
        bundle["text/plain"] = f"<BatchingAnimation: {self.n_frames} frames, {self.params}>"
        return bundle
