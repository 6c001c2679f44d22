"""The plots' labels stay inside the picture (issue 16, item 15)."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from scheduler.sim import plots  # noqa: E402
from scheduler.sim.results import SimResult  # noqa: E402


@pytest.mark.parametrize("last_day", [0.5, 9.0, 9.95])
def test_the_last_arrival_label_is_not_cut_off(last_day):
    hourly = [0.5 + 0.4 * ((h // 24) % 2) for h in range(10 * 24)]
    result = SimResult({"utilization": 0.7}, utilization=hourly, last_arrival_s=last_day * 86400)
    fig = plots.utilization_figure({"fairshare": result})
    fig.tight_layout()
    fig.canvas.draw()

    (ax,) = fig.axes
    (label,) = [t for t in ax.texts if t.get_text() == "last arrival"]
    box = label.get_window_extent(fig.canvas.get_renderer())
    inside = ax.get_window_extent()
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)
    assert inside.y0 <= box.y0 and box.y1 <= inside.y1, (box, inside)
    plots.plt.close(fig)
