ip -br addr; rdma link; ibv_devinfo -v -d rxe0 | grep -E 'GID|mtu|state'
ibv_rc_pingpong -d rxe0 -g 1 -n 100; echo "pingpong-server rc $?"
ib_write_bw -d rxe0 -x 1 -F -D 3; echo "write_bw-server rc $?"
ib_read_bw -d rxe0 -x 1 -F -D 3; echo "read_bw-server rc $?"
