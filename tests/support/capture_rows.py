"""Small hand-checkable RoundTrace column batches for the capture tests."""

from specdec.capture.writer import FIELDS

#: run_id "r" (1) + engine_request_id (19) + phase "decode" (6) = 26 string bytes
REQ_ID = "chatcmpl-x-0000abcd"


def rows(n: int, start: int = 0, pid: int = 1) -> dict[str, list]:
    """``n`` rows with step_index = round_index = start, start+1, ..."""
    base = {
        "run_id": "r",
        "engine_request_id": REQ_ID,
        "pid": pid,
        "process_token": f"{pid}-0000abcd",
        "phase": "decode",
        "tokens_proposed": 4,
        "tokens_accepted": 2,
        "tokens_emitted": 3,
        "batch_size": 1,
        "num_scheduled_tokens": 5,
        "context_len": 10,
        "draft_ms": 0.1,
        "verify_ms": 20.0,
        "wall_time_ns": 1,
        "step_drafts_verified": None,
    }
    cols = {f: [base[f]] * n for f in base}
    cols["step_index"] = list(range(start, start + n))
    cols["round_index"] = list(range(start, start + n))
    return {f: cols[f] for f in FIELDS}
