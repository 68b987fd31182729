"""Shared bits of the examples: latency statistics and the --address/--spawn options."""
import argparse
import statistics
from typing import List, Optional


def pct(xs: List[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def summary_ms(name: str, xs: List[float]) -> str:
    if not xs:
        return f"{name}: no samples"
    return (f"{name}: median {statistics.median(xs) * 1e3:.1f} ms, "
            f"p90 {pct(xs, 90) * 1e3:.1f} ms ({len(xs)} samples)")


def inter_token_gaps(times: List[float]) -> List[float]:
    return [b - a for a, b in zip(times, times[1:])]


def add_connection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--address", help="host:port of a running streamd")
    p.add_argument("--spawn", metavar="STREAMD",
                   help="start this streamd binary on a free port instead (needs $STREAMD_MODEL)")
    p.add_argument("--ca", help="PEM CA bundle (TLS)")
    p.add_argument("--api-key", help="API key (default $STREAMD_API_KEY)")


def connect_target(args) -> "tuple[str, Optional[object]]":
    if args.spawn:
        from streamd_client.testing import Daemon
        d = Daemon(binary=args.spawn)
        return d.address, d
    if not args.address:
        raise SystemExit("give --address HOST:PORT or --spawn STREAMD")
    return args.address, None
