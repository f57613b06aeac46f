#!/usr/bin/env python3
"""test/bench/soak_plot.py: the plot of the benchmark's soak (row 12).

    soak_plot.py SOAK_CSV PNG [FRESH_BYTES_PER_ROW [TITLE [FROM_S]]]

Owns: reading soak.csv (written by test/bench/soak.sh, one sample a line)
and drawing its series over time into PNG, three panels sharing the time
axis: live rows and dead tuples; bytes per live row, with the freshly loaded
reference as a line (and twice it, the target); the claim rate per sample
interval.  Autovacuum runs (autovacuum_count going up) are marked in every
panel, and so is the part the result rows are measured over (from FROM_S
seconds on).  Needs matplotlib (Debian's python3-matplotlib); draws without a
display (Agg).
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)


def column(rows, name):
    return [float(r[name]) if r[name] != "" else None for r in rows]


def main():
    src, png = sys.argv[1], sys.argv[2]
    fresh = float(sys.argv[3]) if len(sys.argv) > 3 and sys.argv[3] else None
    title = sys.argv[4] if len(sys.argv) > 4 else "dedup soak"
    since = float(sys.argv[5]) if len(sys.argv) > 5 else None
    with open(src, newline="") as f:
        rows = list(csv.DictReader(f))
    t = column(rows, "elapsed_s")
    av = column(rows, "autovacuum_count")
    runs = [t[i] for i in range(1, len(rows)) if av[i] > av[i - 1]]

    fig, (a, b, c) = plt.subplots(3, 1, sharex=True, figsize=(8, 7.5), dpi=80)
    fig.suptitle(title, fontsize=10)

    a.plot(t, [v / 1000 for v in column(rows, "live_rows")], label="live rows (count(*))")
    a.plot(t, [v / 1000 for v in column(rows, "dead_tuples")], label="dead tuples (n_dead_tup)")
    a.set_ylabel("thousands")
    a.legend(loc="upper left", fontsize=8)

    bpr = column(rows, "bytes_per_live_row")
    b.plot([x for x, v in zip(t, bpr) if v is not None], [v for v in bpr if v is not None],
           color="tab:purple", label="soak: total relation size / live rows")
    if fresh:
        b.axhline(fresh, color="tab:green", linestyle="--", label="freshly loaded (%.0f)" % fresh)
        b.axhline(2 * fresh, color="tab:red", linestyle=":", label="target: 2x fresh")
    b.set_ylabel("bytes per live row")
    b.set_ylim(bottom=0)
    b.legend(loc="upper left", fontsize=8)

    rate = column(rows, "claim_rate")
    c.plot([x for x, v in zip(t, rate) if v is not None], [v for v in rate if v is not None],
           color="tab:orange", label="claims/s per sample interval")
    c.set_ylabel("claims/s")
    c.set_ylim(bottom=0)
    c.set_xlabel("seconds")
    c.legend(loc="lower left", fontsize=8)

    for ax in (a, b, c):
        ax.grid(True, alpha=0.3)
        if since is not None:
            ax.axvspan(since, t[-1], color="tab:blue", alpha=0.06)
        for x in runs:
            ax.axvline(x, color="grey", alpha=0.25, linewidth=0.8)
    if runs:
        a.plot([], [], color="grey", alpha=0.5, linewidth=0.8, label="autovacuum of the table")
    if since is not None:
        a.fill_between([], [], color="tab:blue", alpha=0.1, label="measured (last half)")
    a.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(png)


main()
