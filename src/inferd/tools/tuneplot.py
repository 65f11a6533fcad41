"""``inferd tune --plot``: every candidate's best throughput against its p99."""

from __future__ import annotations

from pathlib import Path

from inferd.tools.tune import TuneReport


def plot_candidates(report: TuneReport, path: Path) -> int:
    """One labelled point per measured candidate (the best one in red); returns the points."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(
            "inferd tune --plot needs matplotlib: pip install 'inferd[bench]'"
        ) from None
    measured = [c for c in report.candidates if c.best is not None]
    figure, axes = plt.subplots(figsize=(8, 5))
    for candidate in measured:
        assert candidate.best is not None
        colour = "tab:red" if candidate is report.best else "tab:blue"
        axes.scatter(candidate.best.p99_ms, candidate.throughput, color=colour)
        axes.annotate(
            candidate.name,
            (candidate.best.p99_ms, candidate.throughput),
            fontsize=7,
            textcoords="offset points",
            xytext=(4, 4),
        )
    axes.set_xlabel("p99 latency (ms) at the best step")
    axes.set_ylabel("throughput (requests/s)")
    axes.set_title("inferd tune: candidates")
    axes.grid(True, alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return len(measured)
