"""Benchmark: how fast do the trace importers run, and how much memory do they take?

For the Azure conversation trace (19,366 rows, ../shared/data/azure-llm-2023:
Microsoft's AzurePublicDataset, CC-BY 4.0; see its README) and a generated
file of ``--rows`` rows (default 1,000,000) in each format (azure, burstgpt,
burstgpt-sessions, mooncake), runs ``specdec.traffic.importers.import_to_file`` in a fresh
process each (so every figure includes the start-up: imports, the pool, the
tokenizer) and prints wall seconds, CPU seconds, rows/s and the process's
peak RSS. With ``--old COMMIT`` the same import of the first ``--old-rows``
rows of the Azure trace also runs on that commit's code (extracted with
``git archive``; its ``import_trace`` + ``write_traffic``), side by side, as
rows/s: the old code took ~16 ms of CPU per row, so a whole file is out of reach.
With ``--compare COMMIT`` (a commit that has ``import_to_file``) every
generated file is also imported with that commit's code, side by side.

Generated files: Azure and BurstGPT rows take their lengths from the Azure
trace (cycled) and arrive 2 ms apart; burstgpt-sessions rows are all turns
of 4-turn sessions, four interleaved, each turn's input its history plus the
Azure row's context (``gen_burstgpt_sessions``); Mooncake rows take lengths and prefix
blocks from ../shared/data/mooncake-fast25 (cycled, block ids shifted per
cycle so later cycles do not share the first cycle's blocks). Mooncake rows
are composed from cached prefix blocks (``traffic.importers.blocks``) and
written as traffic format version 3 (each row its block ids and its own
tail, each block once in the file), so the composition, not the output,
bounds that run: ``--mooncake-rows`` (default: ``--rows``).
``--formats`` picks the generated files, ``--no-trace`` skips the whole Azure trace.

    .venv/bin/python benchmarks/importers.py [--rows N] [--old COMMIT]
    .venv/bin/python benchmarks/importers.py --no-trace --formats mooncake --mooncake-rows 100000
    .venv/bin/python benchmarks/importers.py --no-trace --formats burstgpt-sessions --rows 10000 --compare b3985ac
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT.parent / "shared" / "data"
AZURE = DATA / "azure-llm-2023" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = DATA / "mooncake-fast25" / "synthetic_trace.jsonl"

CHILD = r"""
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
old = sys.argv[4] != "-"
if old:  # the old commit's tree instead of the editable install
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f)]
    sys.path.insert(0, sys.argv[4])
from specdec.traffic import importers
opts = importers.ImportOptions() if sys.argv[1] == "azure" else importers.ImportOptions(category="chat")
if old and sys.argv[5] == "memory":  # a commit before import_to_file
    report = importers.import_trace(sys.argv[1], sys.argv[2], opts)
    importers.write_traffic(report, sys.argv[3])
    n = len(report.rows)
else:
    n = importers.import_to_file(sys.argv[1], sys.argv[2], opts, sys.argv[3]).kept
print(json.dumps({"rows": n, "wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                  "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def run(fmt: str, path: Path, out: Path, old_tree: str = "-", how: str = "file") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, fmt, str(path), str(out), old_tree, how],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{fmt} {path.name} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def azure_lengths() -> list[tuple[str, str]]:
    with AZURE.open(newline="") as fh:
        return [(r["ContextTokens"], r["GeneratedTokens"]) for r in csv.DictReader(fh)]


def gen_azure(path: Path, n: int, lengths) -> None:
    import datetime as dt

    t = dt.datetime(2023, 11, 16)
    with path.open("w") as fh:
        fh.write("TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for i in range(n):
            c, g = lengths[i % len(lengths)]
            fh.write(f"{(t + dt.timedelta(milliseconds=2 * i)).strftime('%Y-%m-%d %H:%M:%S.%f')}0,{c},{g}\n")


def gen_burstgpt(path: Path, n: int, lengths) -> None:
    with path.open("w") as fh:
        fh.write("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        for i in range(n):
            c, g = lengths[i % len(lengths)]
            fh.write(f"{i * 0.002:.3f},ChatGPT,{c},{g},{int(c) + int(g)},Conversation log\n")


def gen_burstgpt_sessions(path: Path, n: int, lengths) -> None:
    """Every row a turn of a 4-turn session, four sessions interleaved; a
    turn's input holds its history: the previous turn's input and output
    (at most 256) plus the Azure row's context as the new message."""
    with path.open("w") as fh:
        fh.write("Timestamp,Session ID,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
        history: dict[int, int] = {}
        for i in range(n):
            c, g = lengths[i % len(lengths)]
            s = (i // 16) * 4 + i % 4
            turn_in = history.pop(s, 0) + int(c)
            if (i % 16) < 12:
                history[s] = turn_in + min(int(g), 256)
            fh.write(f"{i * 0.002:.3f},s{s},ChatGPT,{turn_in},{g},{turn_in + int(g)},Conversation log\n")


def gen_mooncake(path: Path, n: int) -> None:
    rows = [json.loads(line) for line in MOONCAKE.open() if line.strip()]
    top = max(max(r["hash_ids"], default=0) for r in rows) + 1
    with path.open("w") as fh:
        for i in range(n):
            r, cycle = rows[i % len(rows)], i // len(rows)
            fh.write(
                json.dumps(
                    {
                        "timestamp": 2 * i,
                        "input_length": r["input_length"],
                        "output_length": r["output_length"],
                        "hash_ids": [h + cycle * top for h in r["hash_ids"]],
                    }
                )
                + "\n"
            )


def old_tree(commit: str, into: Path) -> str:
    """The commit's package laid out as the editable install maps it (specdec/<room>)."""
    into.mkdir()
    tar = subprocess.run(["git", "-C", str(ROOT), "archive", commit], capture_output=True, check=True).stdout
    src = into / "src"
    src.mkdir()
    subprocess.run(["tar", "-x", "-C", str(src)], input=tar, check=True)
    pkg = into / "specdec"
    os.rename(src / "specdec", pkg)
    for room in ("replay", "schemas", "capture", "analytics", "sql"):
        if (pkg / room).is_symlink():  # since 6a2c4ad specdec/<room> is a committed link to ../<room>
            (pkg / room).unlink()
        os.rename(src / room, pkg / room)
    return str(into)


def line(name: str, r: dict) -> str:
    return (
        f"{name:<34} {r['rows']:>9,} rows {r['wall_s']:8.1f} s wall {r['cpu_s']:8.1f} s CPU "
        f"{r['rows'] / r['wall_s']:>10,.0f} rows/s  peak RSS {r['peak_rss_mib']:6.0f} MiB"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument(
        "--mooncake-rows", type=int, default=None, help="rows of the generated Mooncake file (default: --rows)"
    )
    ap.add_argument("--old", default=None, help="a commit whose importers to measure side by side")
    ap.add_argument("--old-rows", type=int, default=1_000)
    ap.add_argument(
        "--formats",
        default="azure,burstgpt,burstgpt-sessions,mooncake",
        help="generated files of these formats (comma-separated)",
    )
    ap.add_argument("--no-trace", action="store_true", help="skip the whole Azure trace")
    ap.add_argument(
        "--compare",
        default=None,
        help="a commit with import_to_file: each generated file is also imported with its code, side by side",
    )
    args = ap.parse_args()
    print(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} CPUs)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        compare_tree = old_tree(args.compare, tmp / "compare") if args.compare else "-"
        lengths = azure_lengths()
        results = {} if args.no_trace else {"azure conversation trace (whole)": run("azure", AZURE, tmp / "a.parquet")}
        if args.old:
            head = tmp / "azure_conv_head.csv"
            head.write_text("".join(AZURE.open().readlines()[: args.old_rows + 1]))
            tree = old_tree(args.old, tmp / "old")
            results[f"azure first {args.old_rows} rows, new"] = run("azure", head, tmp / "h.parquet")
            results[f"azure first {args.old_rows} rows, old {args.old[:8]}"] = run(
                "azure", head, tmp / "o.parquet", tree, "memory"
            )
        for name, gen, n in (
            ("azure", gen_azure, args.rows),
            ("burstgpt", gen_burstgpt, args.rows),
            ("burstgpt-sessions", gen_burstgpt_sessions, args.rows),
            ("mooncake", None, args.mooncake_rows or args.rows),
        ):
            if name not in args.formats.split(","):
                continue
            fmt = name.split("-")[0]
            path = tmp / f"gen_{name}_conv.{'jsonl' if fmt == 'mooncake' else 'csv'}"
            gen_mooncake(path, n) if gen is None else gen(path, n, lengths)
            results[f"{name} generated"] = run(fmt, path, tmp / f"{name}.parquet")
            if args.compare:
                results[f"{name} generated, {args.compare[:8]}"] = run(fmt, path, tmp / "c.parquet", compare_tree)
            path.unlink()
        for name, r in results.items():
            print(line(name, r))
    print(f"load average at end: {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)")


if __name__ == "__main__":
    main()
