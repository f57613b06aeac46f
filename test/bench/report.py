#!/usr/bin/env python3
"""test/bench/report.py: the benchmark's printed table and results.json.

    report.py OUTDIR [KEY=VALUE...]

Owns: reading OUTDIR/results.csv (written by lib.sh's result, figure and skip) and
OUTDIR/raw.csv (every single measurement), printing the side-by-side table
(median and min-max of each side, ratio = dedup / baseline of the medians,
or for a row of one series (lib.sh's figure) the figure its note names)
and writing OUTDIR/results.json: the KEY=VALUE settings of the run, the rows,
and the raw measurements of each series.  Reports; asserts nothing.
"""
import csv
import json
import os
import sys


def num(s):
    if s in ("", None):
        return None
    v = float(s)
    return int(v) if v.is_integer() else v


def fmt(v):
    if v is None:
        return "-"
    if abs(v) >= 100:
        return "%.0f" % v
    return "%.3g" % v


def side(row, which):
    m = num(row[which + "_median"])
    if m is None:
        return ""
    lo, hi = num(row[which + "_min"]), num(row[which + "_max"])
    rng = fmt(lo) if lo == hi else "%s-%s" % (fmt(lo), fmt(hi))
    return "%s %s [%s]" % (row[which], fmt(m), rng)


def main():
    out = sys.argv[1]
    meta = dict(a.split("=", 1) for a in sys.argv[2:])
    with open(os.path.join(out, "results.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    raw = {}
    with open(os.path.join(out, "raw.csv"), newline="") as f:
        for r in csv.DictReader(f):
            raw.setdefault(r["series"], []).append(num(r["value"]))

    w_what = max(len("measurement [unit]"), *(len(r["measurement"]) + len(r["unit"]) + 3 for r in rows))
    w_base = max(len("baseline median [min-max]"), *(len(side(r, "baseline")) for r in rows))
    w_dedup = max(len("dedup median [min-max]"), *(len(side(r, "dedup")) for r in rows))
    line = "%-8s %-*s %-*s %-*s %7s  %s"
    print()
    print(line % ("row", w_what, "measurement [unit]", w_base, "baseline median [min-max]",
                  w_dedup, "dedup median [min-max]", "ratio", "note"))
    print("-" * (8 + w_what + w_base + w_dedup + 14 + 20))
    for r in rows:
        what = r["measurement"] + (" [%s]" % r["unit"] if r["unit"] else "")
        ratio = "%.2f" % float(r["ratio"]) if r["ratio"] else "-"
        print(line % (r["id"], w_what, what, w_base, side(r, "baseline"),
                      w_dedup, side(r, "dedup"), ratio, r["note"]))
    print()
    print("ratio = dedup median / baseline median (for 8L and 10b: larger size / smaller size;"
          " for 8R: sweep rows/s / claim tps; for 5 and 13r: dedup or the layout / Redis; for a row of one series,"
          " 12c: the figure its note names);"
          " performance targets are reported, not asserted")

    doc = {
        "settings": meta,
        "ratio": "dedup median / baseline median; for a row without baseline, the figure its note names",
        "rows": [
            {
                "id": r["id"],
                "measurement": r["measurement"],
                "unit": r["unit"],
                "baseline": None if not r["baseline"] else {
                    "label": r["baseline"], "median": num(r["baseline_median"]),
                    "min": num(r["baseline_min"]), "max": num(r["baseline_max"]),
                    "n": num(r["baseline_n"])},
                "dedup": None if not r["dedup"] else {
                    "label": r["dedup"], "median": num(r["dedup_median"]),
                    "min": num(r["dedup_min"]), "max": num(r["dedup_max"]),
                    "n": num(r["dedup_n"])},
                "ratio": num(r["ratio"]),
                "skipped": not r["baseline"] and not r["dedup"],
                "note": r["note"],
            }
            for r in rows
        ],
        "series": raw,
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


main()
