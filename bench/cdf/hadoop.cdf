# Facebook Hadoop cluster flow sizes.
# Source: A. Roy, H. Zeng, J. Bagga, G. Porter, A. C. Snoeren, "Inside the
# Social Network's (Datacenter) Network", SIGCOMM 2015, Fig. 6 (Hadoop), as
# digitized by the HPCC simulations (Li et al., SIGCOMM 2019,
# traffic_gen/FbHdp_distribution.txt, percent converted to fractions).
# Used by: Floodgate (CoNEXT'21) "Hadoop", BFC (NSDI'22) "FB_Hadoop".
# format: <flow size in bytes> <cumulative probability>
1 0
100 0.01
200 0.02
300 0.05
350 0.15
400 0.2
500 0.3
600 0.4
700 0.5
1000 0.6
2000 0.67
7000 0.7
30000 0.72
50000 0.82
80000 0.87
120000 0.9
300000 0.95
1000000 0.975
2000000 0.99
10000000 1
