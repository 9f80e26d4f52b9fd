# Web search flow sizes.
# Source: M. Alizadeh et al., "Data Center TCP (DCTCP)", SIGCOMM 2010, Fig. 4
# (query/background flows of a production web-search cluster), as digitized in
# 1460-byte packets by the pFabric simulations (Alizadeh et al., SIGCOMM 2013)
# and reused by PIAS, HPCC and Homa (workload W5). Sizes below are packets x 1460.
# Used by: Floodgate (CoNEXT'21) "Web Search", TOP (TPDS'20) "web search".
# format: <flow size in bytes> <cumulative probability>
8760 0.15
18980 0.2
27740 0.3
48180 0.4
77380 0.53
194180 0.6
973820 0.7
1946180 0.8
4866180 0.9
9738820 0.97
29200000 1
