# Data mining flow sizes.
# Source: A. Greenberg et al., "VL2: A Scalable and Flexible Data Center
# Network", SIGCOMM 2009, Fig. 2 (flow sizes in a data-mining cluster), as
# digitized in 1460-byte packets by the pFabric simulations (SIGCOMM 2013).
# Sizes below are packets x 1460. Used by: TOP (TPDS'20) "data mining".
# Heavy tail (largest flow ~ 1 GB): scale it (sluice-tg flows --scale) on slow
# lab links.
# format: <flow size in bytes> <cumulative probability>
1460 0.5
2920 0.6
4380 0.7
10220 0.8
389820 0.9
3076220 0.95
97333820 0.99
973333820 1
