"""Draws the placement model: a text bar per card for the terminal, a PNG and an SVG for the
report directory (matplotlib, Agg backend, no pyplot state)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from matplotlib import colormaps, rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .placement import CardMap, Segment, TenantMap

PNG_NAME = "labcheck-placement.png"
SVG_NAME = "labcheck-placement.svg"

# Terminal -----------------------------------------------------------------------------
BAR_WIDTH = 24
FILLS = "#=%@"  # one per segment in turn, so neighbouring pods stay apart
FREE = "."


def text_bar(card: CardMap, width: int = BAR_WIDTH) -> str:
    """`[####====....]`: each pod's memory in turn, at least one character each, then free."""
    cells, pos, used = [], 0, 0
    for i, seg in enumerate(card.segments):
        used += seg.mem_mb
        end = min(max(round(used * width / max(card.devmem, 1)), pos + 1), width)
        cells.append(FILLS[i % len(FILLS)] * (end - pos))
        pos = end
    return "[" + "".join(cells) + FREE * (width - pos) + "]"


def _segment_text(seg: Segment) -> str:
    return f"{seg.pod} {seg.mem_mb} MB {seg.cores}%"


def card_line(card: CardMap) -> str:
    room = card.no_room or f"next pod up to {card.largest_free_mb} MB"
    pods = "; ".join(
        f"{FILLS[i % len(FILLS)]} {_segment_text(s)}" for i, s in enumerate(card.segments)
    )
    head = (
        f"{card.node} #{card.index} {text_bar(card)} {card.used_mb}/{card.devmem} MB, "
        f"cores {card.used_cores}%, {room}"
    )
    return f"{head}: {pods}" if pods else head


def text_bars(m: TenantMap) -> tuple[str, ...]:
    return tuple(card_line(c) for c in m.cards) + tuple(f"stray slice: {s}" for s in m.stray)


def summary_line(m: TenantMap) -> str:
    nodes = len({c.node for c in m.cards})
    return (
        f"{len(m.cards)} card(s) on {nodes} node(s), {len(m.pods)} pod(s), "
        f"{m.allocated_mb}/{m.total_mb} MB allocated, largest free slice {m.largest_free_mb} MB"
    )


# Picture ------------------------------------------------------------------------------
ROW = 1.3  # data units per card: memory bar, cores bar, a caption line
HEADER = 0.9  # above each tenant's cards
INCH_PER_UNIT = 0.55
MEM_H, CORE_H, CORE_GAP = 0.5, 0.14, 0.08
LINE = 0.3  # one summary text line, in data units at INCH_PER_UNIT
NAMESPACE_MAPS = ("Blues", "Oranges", "Greens", "Purples", "Reds", "Greys")
FREE_COLOR, EDGE = "#f2f2f2", "#555555"
Color = tuple[float, float, float, float]


def _shades(m: TenantMap) -> dict[str, Color]:
    """A hue per namespace, a shade per pod: slices of one namespace read as one family."""
    by_ns: dict[str, list[str]] = {}
    for pod in m.pods:
        by_ns.setdefault(pod.split("/", 1)[0], []).append(pod)
    out = {}
    for k, (_, pods) in enumerate(sorted(by_ns.items())):
        cmap = colormaps[NAMESPACE_MAPS[k % len(NAMESPACE_MAPS)]]
        for j, pod in enumerate(pods):
            out[pod] = cmap(0.3 + 0.35 * j / max(len(pods) - 1, 1))
    return out


@dataclass(frozen=True)
class _Row:
    y: float  # centre of the memory bar
    card: CardMap


def _layout(maps: Sequence[TenantMap]) -> tuple[list[tuple[TenantMap, float]], list[_Row], float]:
    """Tenant header positions and card rows, top (y=0) down; also the total height."""
    heads, rows, y = [], [], 0.0
    for m in maps:
        heads.append((m, y))
        top = y + HEADER
        for i, card in enumerate(m.cards):
            rows.append(_Row(top + i * ROW + MEM_H / 2, card))
        summary = (6 + len(m.cards) + len(m.stray)) * LINE
        y = top + max(len(m.cards) * ROW, summary, ROW)
    return heads, rows, y


def _fit_label(
    ax: Axes,
    x: float,
    y: float,
    width: float,
    options: Sequence[str],
    renderer: RendererAgg,
    **style: object,
) -> int:
    """Write the first of `options` that fits inside a segment `width` (axes fraction) wide;
    return its position in `options`, or len(options) when none fits."""
    limit = width * ax.get_window_extent(renderer).width - 8
    for i, text in enumerate(options):
        label = ax.text(x, y, text, ha="center", va="center", fontsize=7.5, **style)
        if label.get_window_extent(renderer).width <= limit:
            return i
        label.remove()
    return len(options)


def _draw_card(ax: Axes, row: _Row, colors: Mapping[str, Color], renderer: RendererAgg) -> None:
    card, y = row.card, row.y
    core_y = y + MEM_H / 2 + CORE_GAP + CORE_H / 2
    ax.add_patch(Rectangle((0, y - MEM_H / 2), 1, MEM_H, fc=FREE_COLOR, ec=EDGE, hatch="///"))
    ax.add_patch(Rectangle((0, core_y - CORE_H / 2), 1, CORE_H, fc=FREE_COLOR, ec=EDGE, lw=0.5))
    x_mem = x_core = 0.0
    hidden = []
    for seg in card.segments:
        w = seg.mem_mb / max(card.devmem, 1)
        ax.add_patch(
            Rectangle((x_mem, y - MEM_H / 2), w, MEM_H, fc=colors[seg.pod], ec="white", lw=1.5)
        )
        name = seg.pod.split("/", 1)[1]
        options = [f"{seg.pod}\n{seg.mem_mb} MB · {seg.cores}%", f"{name} {seg.mem_mb} MB", name]
        options += [f"{tail}\n{seg.mem_mb} MB", tail] if (tail := _name_tail(name)) else []
        if _fit_label(ax, x_mem + w / 2, y, w, options, renderer) > 0:
            hidden.append(_segment_text(seg))  # the caption says what the bar could not
        cw = seg.cores / max(card.devcore, 1)  # HAMi allows a card without a core count
        ax.add_patch(
            Rectangle((x_core, core_y - CORE_H / 2), cw, CORE_H, fc=colors[seg.pod], ec="white")
        )
        x_mem += w
        x_core += cw
    if card.free_mb > 0:
        _fit_label(
            ax,
            x_mem + (1 - x_mem) / 2,
            y,
            1 - x_mem,
            [f"free {card.free_mb} MB", f"{card.free_mb} MB"],
            renderer,
            bbox={"fc": "white", "ec": "none", "pad": 1.5},  # readable over the hatching
        )
    label = f"{card.node} #{card.index}\n{card.type}, {card.devmem} MB"
    ax.text(-0.01, y, label, ha="right", va="center", fontsize=8.5)
    ax.text(-0.01, core_y, "cores", ha="right", va="center", fontsize=6.5, color=EDGE)
    slots = f"slots {card.slots_used}/{card.count}" if card.count else f"{card.slots_used} shares"
    caption = f"cores {card.used_cores}%, {slots}"
    _caption(ax, core_y + CORE_H / 2 + 0.05, caption, hidden, renderer)


def _name_tail(name: str) -> str:
    """`…lock-0` for `lc-1a2b3c4d-lock-0`: a narrow segment still tells its pods apart ("" when
    the name has no prefix to drop)."""
    parts = name.split("-")
    return "…" + "-".join(parts[-2:]) if len(parts) > 2 else ""


def _caption(ax: Axes, y: float, head: str, hidden: list[str], renderer: RendererAgg) -> None:
    """Under the card: its cores and slots, then the pods too narrow for their label (left to
    right), as many as fit under the bar."""
    limit = ax.get_window_extent(renderer).width
    text = ax.text(0, y, head, va="top", fontsize=6.5, color=EDGE)
    for i, seg in enumerate(hidden):
        before = text.get_text()
        text.set_text(f"{before}{'; left to right: ' if i == 0 else ', '}{seg}")
        if text.get_window_extent(renderer).width > limit:
            text.set_text(f"{before}, +{len(hidden) - i} more in the JSON report")
            return


def _free_slice(card: CardMap) -> str:
    return f"{card.largest_free_mb} MB" + (f" ({card.no_room})" if card.no_room else "")


def _summary(ax: Axes, m: TenantMap, y: float) -> None:
    pct = 100 * m.allocated_mb / m.total_mb if m.total_mb else 0
    lines = [
        _when_read(m),
        f"{len(m.cards)} card(s), {len(m.pods)} pod(s)",
        f"memory {m.allocated_mb} / {m.total_mb} MB ({pct:.0f}%)",
        "largest free slice per card:",
        *(f"  {c.node} #{c.index}: {_free_slice(c)}" for c in m.cards),
        f"next pod: up to {m.largest_free_mb} MB",
    ]
    lines += [f"stray: {s}" for s in m.stray]
    ax.text(0, y, m.tenant, fontsize=10, fontweight="bold", va="top")
    ax.text(0, y + HEADER * 0.6, "\n".join(lines), fontsize=8.5, va="top", linespacing=1.45)


def _when_read(m: TenantMap) -> str:
    return f"{m.source} (the run's fullest)" if m.during else "live (what the cards hold now)"


def title(maps: Sequence[TenantMap], *, stack: str, run_id: str, when: str) -> str:
    """Names the moment drawn: during a check (the run's peak) or live; per tenant if mixed."""
    sources = {m.source for m in maps}
    if sources == {"live"}:
        what = "What HAMi holds on each card, live"
    elif len(sources) == 1:
        what = f"What HAMi placed on each card {sources.pop()}"
    else:
        what = "What HAMi placed on each card (when: beside each tenant)"
    return f"{what}: stack {stack}, run {run_id}, {when}"


def render(maps: Sequence[TenantMap], *, stack: str, run_id: str, when: str) -> Figure:
    heads, rows, height = _layout(maps)
    fig = Figure(figsize=(15, 1.6 + max(height, 2) * INCH_PER_UNIT))
    FigureCanvasAgg(fig)
    top, bottom = 1 - 0.9 / fig.get_figheight(), 0.55 / fig.get_figheight()
    bars = fig.add_axes((0.2, bottom, 0.52, top - bottom))
    side = fig.add_axes((0.75, bottom, 0.24, top - bottom), sharey=bars)
    for ax in (bars, side):
        ax.set_ylim(max(height, 2), -0.1)
    bars.set_xlim(0, 1)
    bars.set_yticks([])
    bars.set_xticks([0, 0.25, 0.5, 0.75, 1], ["0", "25%", "50%", "75%", "100%"], fontsize=7)
    bars.tick_params(axis="x", length=2, pad=1)
    bars.set_xlabel("share of the card's memory", fontsize=7.5, color=EDGE, labelpad=2)
    for spine in ("top", "right", "left"):
        bars.spines[spine].set_visible(False)
    side.set_axis_off()
    renderer = fig.canvas.get_renderer()
    colors: dict[str, Color] = {}
    for m, y in heads:
        colors.update(_shades(m))
        bars.text(-0.01, y + 0.35, m.tenant, ha="right", fontsize=10, fontweight="bold")
        if not m.cards:
            bars.text(0, y + HEADER, "no registered card", fontsize=8.5, va="top")
        _summary(side, m, y)
    for row in rows:
        _draw_card(bars, row, colors, renderer)
    fig.suptitle(
        title(maps, stack=stack, run_id=run_id, when=when),
        fontsize=12,
        y=1 - 0.3 / fig.get_figheight(),
    )
    fig.text(
        0.2,
        1 - 0.62 / fig.get_figheight(),
        "bar = the card's memory (% of its MB), thin bar = its cores; "
        "a colour per pod, one hue per namespace; hatched = free",
        fontsize=8,
        color=EDGE,
    )
    return fig


def write_pictures(
    maps: Sequence[TenantMap], directory: Path, *, stack: str, run_id: str, when: str
) -> list[Path]:
    fig = render(maps, stack=stack, run_id=run_id, when=when)
    png, svg = directory / PNG_NAME, directory / SVG_NAME
    fig.savefig(png, dpi=110)
    # SVG text stays text (searchable, selectable); no date or random ids: same input, same file.
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": "labcheck"}):
        fig.savefig(svg, metadata={"Date": None})
    return [png, svg]
