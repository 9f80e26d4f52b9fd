# Pulser's workload: short flows uniform in 8-32 KB, long flows of 1 MB,
# long flows carrying 80% of the bytes.
# Source: H. Almasi et al., "Pulser: Fast Congestion Response Using Explicit
# Incast Notifications for Datacenter Networks", §IV ("short flows' sizes are
# randomly chosen from 8 KB to 32 KB and we set long flow sizes to 1 MB. Our
# long flows contribute to 80% of the overall network load").
# Mean short flow 20480 B; long fraction p solves
#   p*1048576 / (p*1048576 + (1-p)*20480) = 0.8  ->  p = 0.072464
# format: <flow size in bytes> <cumulative probability>
8192 0
32768 0.927536
1048576 0.927536
1048576 1
