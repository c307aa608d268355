"""Chart geometry (aggregator/dashboard/charts.py): values land where they should inside the frame."""

import pytest

from ldp_telemetry.aggregator.dashboard import charts
from ldp_telemetry.aggregator.dashboard.charts import FRAME, Interval


@pytest.mark.parametrize(
    "lo, hi, expected",
    [
        (0.0, 1.0, [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]),
        (0.31, 0.47, [0.3, 0.35, 0.4, 0.45, 0.5]),
        (0.0, 0.062, [0.0, 0.02, 0.04, 0.06, 0.08]),
    ],
)
def test_nice_ticks_cover_the_range(lo, hi, expected):
    start, stop, ticks = charts.nice_ticks(lo, hi)
    assert ticks == pytest.approx(expected)
    assert start <= lo and stop >= hi


@pytest.mark.parametrize(
    "values, from_zero, expected",
    [
        # a 2.5% step: one decimal, not "0%, 2%, 5%, 8%, 10%, 12%"
        ([0.03, 0.12], True, ["0.0%", "2.5%", "5.0%", "7.5%", "10.0%", "12.5%"]),
        ([0.3, 0.7], False, ["30%", "40%", "50%", "60%", "70%"]),
        ([0.0, 0.062], True, ["0%", "2%", "4%", "6%", "8%"]),
        ([0.31, 0.47], False, ["30%", "35%", "40%", "45%", "50%"]),
        ([0.501, 0.505], False, ["50.0%", "50.5%", "51.0%", "51.5%"]),
        ([0.001, 0.004], False, ["0.0%", "0.2%", "0.4%", "0.6%", "0.8%", "1.0%", "1.2%"]),
        ([0.0, 1.0], True, ["0%", "20%", "40%", "60%", "80%", "100%"]),
    ],
)
def test_share_tick_labels_are_exact(values, from_zero, expected):
    scale, ticks = charts.share_scale(values, from_zero=from_zero)
    labels = [t.label for t in ticks]
    assert labels == expected
    # Each label reads back as the share its tick stands at (pixels are rounded to 0.01).
    for tick, label in zip(ticks, labels):
        share = scale.lo + (tick.at - scale.start) / (scale.end - scale.start) * (scale.hi - scale.lo)
        assert float(label.rstrip("%")) == pytest.approx(share * 100, abs=1e-3)


def test_band_chart_maps_shares_onto_the_scale():
    windows = ["2026-11-19", "2026-11-20", "2026-11-21"]
    values = [Interval(0.4, 0.3, 0.5), Interval(0.5, 0.4, 0.6), Interval(0.6, 0.5, 0.7)]
    chart = charts.band_chart(windows, values)
    # The ticks run 30% .. 70%: the bottom edge is 0.3, the top 0.7, so 0.5 sits half-way.
    assert [t.label for t in chart.y_ticks][0] == "30%" and chart.y_ticks[-1].label == "70%"
    middle = (FRAME.top + FRAME.bottom_edge) / 2
    assert chart.points[1].y == pytest.approx(middle, abs=0.01)
    assert chart.points[0].low == pytest.approx(FRAME.bottom_edge, abs=0.01)
    assert chart.points[2].high == pytest.approx(FRAME.top, abs=0.01)
    xs = [p.x for p in chart.points]
    assert xs == sorted(xs) and FRAME.left < xs[0] and xs[-1] < FRAME.right_edge
    assert [t.label for t in chart.x_ticks] == windows
    assert [t.edge for t in chart.x_ticks] == ["first", "", "last"]
    assert len(chart.band_polygon.split()) == 6  # upper edge out, lower edge back


def test_bar_chart_heights_and_whiskers():
    windows = ["2026-11-20", "2026-11-21"]
    categories = ["a", "b"]
    values = [[Interval(0.5, 0.4, 0.6), Interval(0.25, 0.2, 0.3)], [Interval(0.0, 0.0, 0.1), None]]
    chart = charts.bar_chart(windows, categories, values)
    assert len(chart.bars) == 3  # the missing estimate leaves a gap
    first, second, third = chart.bars
    assert first.height == pytest.approx(2 * second.height, abs=0.02)  # 50% is twice 25%
    assert third.height == 0
    for bar in chart.bars:
        assert bar.y + bar.height == pytest.approx(FRAME.bottom_edge, abs=0.01)  # bars stand on the axis
        assert FRAME.top <= bar.high <= bar.low <= FRAME.bottom_edge  # pixels grow downwards
        assert FRAME.left <= bar.x and bar.x + bar.width <= FRAME.right_edge
    assert chart.series == categories


@pytest.mark.parametrize("count", [1, 2, 5, 7, 8, 12, 30, 400])
def test_window_labels_are_few_evenly_spaced_and_end_at_the_latest(count):
    # Issue 31: 30 windows were labelled at 0, 10, 20, 29 and 8 at 0, 3, 7: uneven gaps read as
    # uneven time. Counted back from the latest window, every gap is the same number of windows.
    windows = [f"w{i}" for i in range(count)]
    ticks = charts.window_ticks(windows, list(range(count)))
    chosen = [windows.index(t.label) for t in ticks]
    assert chosen[-1] == count - 1 and len(chosen) <= charts.MAX_X_LABELS
    assert len({b - a for a, b in zip(chosen, chosen[1:])}) <= 1
    assert chosen[0] < max(1, (count - 1) / (charts.MAX_X_LABELS - 1))  # the labels span the axis
    assert not any(t.minor for t in (ticks[0], ticks[-1]))


def test_profile_chart_marks_each_epsilon():
    rr = [(0.0, 0.5), (0.5, 0.25), (1.0, 0.0), (1.25, 0.0)]
    other = [(0.0, 0.4), (1.0, 0.2), (2.0, 0.0), (2.5, 0.0)]
    chart = charts.profile_chart([rr, other], [1.0, 2.0], ["a", "b"])
    assert [m.label for m in chart.markers] == ["ε = 1", "ε = 2"]
    assert chart.series == ["a", "b"]
    first = [tuple(map(float, point.split(","))) for point in chart.curves[0].split()]
    assert first[2] == (chart.markers[0].at, FRAME.bottom_edge)  # δ reaches 0 exactly at its ε
    assert first[0][1] < first[1][1]  # δ falls as ε' grows (pixels grow downwards)
