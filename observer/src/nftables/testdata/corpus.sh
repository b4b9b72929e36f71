iptables-nft -N KUBE-FIREWALL
iptables-nft -A INPUT -j KUBE-FIREWALL
iptables-nft -A KUBE-FIREWALL -m mark --mark 0x8000/0x8000 -m comment --comment "kubernetes firewall for dropping marked packets" -j DROP
iptables-nft -A KUBE-FIREWALL -s 10.0.0.0/8 -p tcp --dport 22 -j ACCEPT
iptables-nft -A KUBE-FIREWALL ! -s 10.1.2.3 -i eth0 -p udp --sport 53 -j RETURN
iptables-nft -A KUBE-FIREWALL -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT
iptables-nft -A KUBE-FIREWALL -m state --state NEW -j LOG --log-prefix "x: "
iptables-nft -A KUBE-FIREWALL -p tcp -m multiport --dports 80,443 -j REJECT --reject-with tcp-reset
iptables-nft -A KUBE-FIREWALL -m limit --limit 5/min -j ACCEPT
iptables-nft -A KUBE-FIREWALL -p icmp --icmp-type echo-request -j ACCEPT
iptables-nft -A KUBE-FIREWALL -j MARK --set-xmark 0x4000/0x4000
iptables-nft -A KUBE-FIREWALL -m addrtype --dst-type LOCAL -j RETURN
iptables-nft -A KUBE-FIREWALL -p tcp --tcp-flags SYN,ACK SYN -j DROP
iptables-nft -A KUBE-FIREWALL -d 1.2.3.4/32 -o lo+ -j ACCEPT
iptables-nft -A KUBE-FIREWALL -m recent --set --name foo
iptables-nft -A KUBE-FIREWALL -p tcp --tcp-flags SYN,RST SYN -j TCPMSS --clamp-mss-to-pmtu
iptables-nft -A KUBE-FIREWALL -m physdev --physdev-in eth0 -j ACCEPT
iptables-nft -t nat -N KUBE-SVC-X
iptables-nft -t nat -N KUBE-MARK-MASQ
iptables-nft -t nat -A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
iptables-nft -t nat -A KUBE-SVC-X -p tcp -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.0.0.1:80
iptables-nft -t nat -A KUBE-SVC-X -m comment --comment "hello world" -j KUBE-MARK-MASQ
iptables-nft -t nat -A POSTROUTING -o eth0 -j MASQUERADE
iptables-nft -t nat -A POSTROUTING -s 10.0.0.0/8 -j SNAT --to-source 1.2.3.4
iptables-nft -t nat -A POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
iptables-nft -N C
iptables-nft -A C -m conntrack ! --ctstate NEW,RELATED -j ACCEPT
iptables-nft -A C -m conntrack ! --ctstate NEW -j ACCEPT
iptables-nft -A C -m conntrack --ctstate INVALID -j DROP
iptables-nft -A C -m conntrack --ctstate DNAT -j ACCEPT
iptables-nft -A C -m conntrack --ctstatus CONFIRMED,ASSURED -j ACCEPT
iptables-nft -A C -m state ! --state ESTABLISHED -j DROP
iptables-nft -A C -m state --state ESTABLISHED,RELATED,NEW,INVALID,UNTRACKED -j DROP
iptables-nft -A C -p udp -m multiport --sports 53,123:125 -j ACCEPT
iptables-nft -A C -p tcp -m multiport ! --dports 22 -j ACCEPT
iptables-nft -A C -p tcp -m multiport --ports 1,2 -j ACCEPT
iptables-nft -A C -m addrtype --src-type LOCAL -j RETURN
iptables-nft -A C -m addrtype ! --dst-type LOCAL --limit-iface-in -j RETURN
iptables-nft -A C -j REJECT
iptables-nft -A C -j REJECT --reject-with icmp-host-prohibited
iptables-nft -A C -j REJECT --reject-with icmp-admin-prohibited
iptables-nft -A C -j LOG
iptables-nft -A C -j LOG --log-level debug --log-prefix "a b" --log-tcp-options --log-uid
iptables-nft -A C -j MARK --set-mark 0x10
iptables-nft -A C -j MARK --set-xmark 0x10/0xff
iptables-nft -A C -j MARK --and-mark 0xff
iptables-nft -A C -j MARK --xor-mark 0x1
iptables-nft -A C -m mark --mark 0x1 -j ACCEPT
iptables-nft -A C -m statistic --mode random --probability 0.20000000019 -j ACCEPT
iptables-nft -A C -m statistic --mode nth --every 3 --packet 0 -j ACCEPT
iptables-nft -A C -p icmp --icmp-type 3/1 -j ACCEPT
iptables-nft -A C -p icmp --icmp-type any -j ACCEPT
iptables-nft -A C -m limit --limit 10/sec --limit-burst 20 -j ACCEPT
iptables-nft -A C -j CONNMARK --set-mark 0x1
iptables-nft -A C -m connmark --mark 0x1/0x1 -j ACCEPT
iptables-nft -A C -m tcp -p tcp --syn -j ACCEPT
iptables-nft -A C -p tcp --sport 1:1024 --dport 80 -j ACCEPT
iptables-nft -A C -p tcp ! --dport 80 -j ACCEPT
iptables-nft -A C -m iprange --src-range 1.1.1.1-1.1.1.9 -j ACCEPT
iptables-nft -A C -p all -j ACCEPT
iptables-nft -A C ! -p tcp -j ACCEPT
iptables-nft -A C -s 1.2.3.0/255.255.0.255 -j ACCEPT
iptables-nft -A C -j NFLOG --nflog-group 5
iptables-nft -A C -m pkttype --pkt-type multicast -j DROP
iptables-nft -A C -m owner --uid-owner 0 -j ACCEPT
iptables-nft -A C -m length --length 100:200 -j ACCEPT
iptables-nft -A C -j TRACE
iptables-nft -A C -g KUBE-FIREWALL
iptables-nft -A C -m ttl --ttl-eq 5 -j ACCEPT
iptables-nft -A C -p udp --dport 53 -j ACCEPT
iptables-nft -A C -p sctp --dport 53 -j ACCEPT
iptables-nft -A C -m mac --mac-source 00:11:22:33:44:55 -j ACCEPT
iptables-nft -A C -m tos --tos 0x10 -j ACCEPT
iptables-nft -A C -m dscp --dscp 0x10 -j ACCEPT
iptables-nft -A C -m helper --helper ftp -j ACCEPT
iptables-nft -A C -m connlimit --connlimit-above 10 -j DROP
iptables-nft -A C -m hashlimit --hashlimit-upto 5/sec --hashlimit-name h -j ACCEPT
iptables-nft -A C -m u32 --u32 "0>>22&0x3C@0>>16=0x1" -j ACCEPT
iptables-nft -A C -m policy --dir in --pol ipsec -j ACCEPT
iptables-nft -A C -m rpfilter -j ACCEPT
iptables-nft -A C -m cpu --cpu 0 -j ACCEPT
iptables-nft -A C -m devgroup --src-group 1 -j ACCEPT
iptables-nft -A C -m quota --quota 1000 -j ACCEPT
iptables-nft -A C -m time --timestart 10:00 -j ACCEPT
iptables-nft -A C -j CLASSIFY --set-class 1:2
iptables-nft -A C -j DSCP --set-dscp 1
iptables-nft -A C -j CONNMARK --restore-mark
iptables-nft -A C -j CONNMARK --save-mark
iptables-nft -t nat -A KUBE-SVC-X -p tcp -j DNAT --to-destination 10.0.0.1:80-90 --random
iptables-nft -t nat -A KUBE-SVC-X -j DNAT --to-destination 10.0.0.1
iptables-nft -t nat -A KUBE-SVC-X -p udp -j MASQUERADE --to-ports 1000-2000 --random-fully
iptables-nft -t nat -A KUBE-SVC-X -j SNAT --to-source 1.1.1.1-1.1.1.5 --persistent
iptables-nft -t nat -A KUBE-SVC-X -p tcp -j REDIRECT --to-ports 8080
iptables-nft -t raw -A PREROUTING -j CT --notrack
iptables-nft -t raw -A OUTPUT -j CT --zone 5
ip6tables-nft -A INPUT -s fe80::/10 -p tcp --dport 22 -j ACCEPT
ip6tables-nft -A INPUT -p ipv6-icmp --icmpv6-type echo-request -j ACCEPT
ip6tables-nft -A INPUT -j REJECT
ip6tables-nft -A INPUT -j REJECT --reject-with icmp6-adm-prohibited
ip6tables-nft -A INPUT -m conntrack --ctstate INVALID -j DROP
ip6tables-nft -A INPUT -m hl --hl-eq 255 -j ACCEPT
ip6tables-nft -t nat -A POSTROUTING -j MASQUERADE
ip6tables-nft -t nat -A PREROUTING -p tcp -j DNAT --to-destination [2001:db8::1]:80
ebtables-nft -A FORWARD -p IPv4 --ip-src 1.2.3.4 -j DROP
arptables-nft -A INPUT --opcode Request -j ACCEPT
