"""The server's process options, shared by `python -m pipelines.serving.model_server` and
`conveyor serve`: how many worker processes, and TensorFlow's thread pools (TF Serving's flags).

Only argparse here: `conveyor --help` imports this.
"""

from __future__ import annotations

import argparse

# After a request is answered, the server polls for the next one this long before it sleeps
# (busy_poll.py). Long enough to cover a client's turnaround between keep-alive requests (300 us
# was too short on the benchmark's machine, where the client shares the cores), short enough
# that sparse traffic costs little: at 100 requests/s, a tenth of a core.
DEFAULT_BUSY_POLL_US = 1000


def add_process_options(parser: argparse.ArgumentParser) -> None:
    """Adds `--workers`, the two TensorFlow parallelism flags and `--busy-poll-us` (dests
    `workers`, `intra_op_threads`, `inter_op_threads`, `busy_poll_us`)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port, each loading every model (default 1): more "
        "requests per second on several cores, at the memory of one server per worker",
    )
    for pool, what in (("intra", "inside one op"), ("inter", "running independent ops")):
        parser.add_argument(
            f"--tensorflow-{pool}-op-parallelism",
            type=int,
            default=0,
            dest=f"{pool}_op_threads",
            help=f"as TF Serving's flag: TensorFlow's threads for {what} (0: TensorFlow's "
            "choice; 1 and 1 answer small requests fastest on a small machine)",
        )
    parser.add_argument(
        "--busy-poll-us",
        type=int,
        default=DEFAULT_BUSY_POLL_US,
        dest="busy_poll_us",
        help="after answering a request, poll for the next one this many microseconds before "
        f"sleeping (default {DEFAULT_BUSY_POLL_US}; 0: off): a core that stays awake answers the "
        "next request sooner, at the cost of CPU while requests keep coming (TF Serving has no "
        "such flag)",
    )


def process_options_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with the parsed process options, in one line; None when nothing is."""
    if args.workers < 1:
        return "--workers must be at least 1"
    if args.intra_op_threads < 0 or args.inter_op_threads < 0:
        return "the TensorFlow parallelism flags take 0 (automatic) or more threads"
    if args.busy_poll_us < 0:
        return "--busy-poll-us takes 0 (off) or more microseconds"
    return None
