"""baseline: unmodified kernel TCP, no sluice program anywhere."""

from ..core import Variant, variant


@variant
class Baseline(Variant):
    name = "baseline"
    help = "plain kernel TCP (cubic, no ECN), no sluice mechanism attached"
    cc = "cubic"
    ecn = False

    @classmethod
    def add_args(cls, parser):
        parser.add_argument("--baseline-cc", default="cubic",
                            help="congestion control of the baseline variant (any the kernel offers "
                                 "to namespaces: reno, cubic, bbr here)")
        parser.add_argument("--baseline-ecn", action="store_true",
                            help="baseline hosts negotiate ECN (net.ipv4.tcp_ecn=1)")

    def __init__(self, args):
        super().__init__(args)
        self.cc = getattr(args, "baseline_cc", "cubic")
        self.ecn = getattr(args, "baseline_ecn", False)
