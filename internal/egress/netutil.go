package egress

import "net"

type netIPNet = net.IPNet

var cidrMask30 = net.CIDRMask(30, 32)
