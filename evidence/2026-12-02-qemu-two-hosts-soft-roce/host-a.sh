ip -br addr; ethtool -k $AML_TWO_HOSTS_NIC 2>/dev/null | grep -E 'checksum|segmentation' | head
for i in $(seq 60); do ping -c1 -W1 10.34.0.2 >/dev/null && break; sleep 1; done; ping -c3 10.34.0.2
for i in $(seq 30); do ibv_rc_pingpong -d rxe0 -g 1 -n 100 10.34.0.2 && break; sleep 2; done; echo "pingpong-client rc $?"
for i in $(seq 30); do ib_write_bw -d rxe0 -x 1 -F -D 3 10.34.0.2 && break; sleep 2; done; echo "write_bw rc $?"
for i in $(seq 30); do ib_read_bw -d rxe0 -x 1 -F -D 3 10.34.0.2 && break; sleep 2; done; echo "read_bw rc $?"
