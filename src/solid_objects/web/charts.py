"""Small SVG charts drawn on the server: no chart script, nothing fetched, nothing inline.

Colours come from classes in ``dashboard.css`` (the CSP forbids ``style=``); every
label is escaped, every number formatted here, so a chart carries no user data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from ..admin.views import Activity

WIDTH, HEIGHT, PAD = 360, 84, 14


@dataclass(frozen=True)
class Series:
    label: str
    #: One value per bucket (None: nothing to draw there).
    values: Sequence[float | None]
    #: ``bars`` or ``line``; the CSS class colours it (``series-<css>``).
    kind: str
    css: str


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 or value == int(value) else f"{value:.1f}"


def chart(
    title: str, starts: Sequence[datetime | None], series: Sequence[Series], unit: str = ""
) -> Markup:
    """One chart: bars or lines over the buckets, scaled to the largest value shown."""
    n = max(1, len(starts))
    peak = max((v for s in series for v in s.values if v is not None), default=0.0)
    top = peak or 1.0
    step = (WIDTH - 2) / n
    base_y = HEIGHT - PAD

    def y(v: float) -> float:
        return base_y - (base_y - PAD) * v / top

    def when(i: int) -> str:
        start = starts[i] if i < len(starts) else None
        return "" if start is None else start.strftime("%H:%M")

    parts = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="1" y="10" class="chart-label">{escape(title)} '
        f"(peak {escape(_fmt(peak))}{escape(unit)})</text>",
        f'<line x1="0" y1="{base_y}" x2="{WIDTH}" y2="{base_y}" class="chart-axis"/>',
    ]
    for s in series:
        cls = f"series-{escape(s.css)}"
        if s.kind == "bars":
            for i, v in enumerate(s.values):
                if not v:
                    continue
                top_y = y(v)
                parts.append(
                    f'<rect class="{cls}" x="{1 + i * step:.1f}" y="{top_y:.1f}" '
                    f'width="{max(step - 1, 1):.1f}" height="{base_y - top_y:.1f}">'
                    f"<title>{escape(when(i))} {escape(s.label)}: {escape(_fmt(v))}</title></rect>"
                )
        else:
            xy = [
                (1 + (i + 0.5) * step, y(v), i, v) for i, v in enumerate(s.values) if v is not None
            ]
            if xy:
                points = " ".join(f"{px:.1f},{py:.1f}" for px, py, _, _ in xy)
                parts.append(
                    f'<polyline class="{cls}" fill="none" points="{points}">'
                    f"<title>{escape(s.label)}</title></polyline>"
                )
            for px, py, i, v in xy:  # a lone point draws no line: mark each one
                parts.append(
                    f'<circle class="{cls}" cx="{px:.1f}" cy="{py:.1f}" r="1.8">'
                    f"<title>{escape(when(i))} {escape(s.label)}: {escape(_fmt(v))}{escape(unit)}"
                    "</title></circle>"
                )
    parts.append(
        f'<text x="1" y="{HEIGHT - 2}" class="chart-tick">{escape(when(0))}</text>'
        f'<text x="{WIDTH - 1}" y="{HEIGHT - 2}" class="chart-tick" text-anchor="end">'
        f"{escape(when(n - 1))}</text>"
    )
    legend_x = WIDTH - 1
    for s in reversed(series):
        parts.append(
            f'<text x="{legend_x}" y="10" class="chart-legend series-{escape(s.css)}" '
            f'text-anchor="end">{escape(s.label)}</text>'
        )
        legend_x -= 8 * len(s.label) + 10
    parts.append("</svg>")
    return Markup("".join(parts))


def activity_charts(activity: Activity) -> list[Markup]:
    """The overview's four charts: throughput, latency, retries, dead letters."""
    b = activity.buckets
    starts = [x.start for x in b]
    per = f"/{activity.bucket_seconds} s"
    return [
        chart(
            "Completed",
            starts,
            [Series("completed", [x.completed for x in b], "bars", "done")],
            per,
        ),
        chart(
            "Latency",
            starts,
            [
                Series("p50", [x.latency_p50_ms for x in b], "line", "p50"),
                Series("p99", [x.latency_p99_ms for x in b], "line", "p99"),
            ],
            " ms",
        ),
        chart("Retried", starts, [Series("retried", [x.retried for x in b], "bars", "retry")], per),
        chart("Dead letters", starts, [Series("dead", [x.dead for x in b], "bars", "dead")], per),
    ]
