#!/bin/sh
for m in ip_tables iptable_filter x_tables xt_comment xt_statistic xt_tcpudp xt_multiport xt_mark ipt_REJECT nf_tables nft_numgen nft_reject_ipv4; do modprobe $m 2>/dev/null; done
uname -r > {d}/kernel
stats=$(cat /proc/sys/kernel/bpf_stats_enabled)
echo 1 > /proc/sys/kernel/bpf_stats_enabled || echo 'vm: no BPF statistics'
ip netns add obsvb
ip netns exec obsvb iptables-legacy-restore < {d}/a.rules || echo 'vm: restore failed'
ip netns exec obsvb nft -f {d}/a.nft || echo 'vm: nft -f failed'
restore() { f=$1; s=$(date +%s%N); ip netns exec obsvb iptables-legacy-restore < $f; e=$(date +%s%N); echo $(( (e - s) / 1000 )) >> $2; }
nftf() { f=$1; s=$(date +%s%N); ip netns exec obsvb nft -f $f; e=$(date +%s%N); echo $(( (e - s) / 1000 )) >> $2; }
snap() { for f in /proc/$P/fdinfo/*; do echo "fdinfo $f"; cat $f 2>/dev/null; done > $1; }
settle() { sleep 5; a=-1; for i in $(seq 100); do b=$(wc -c < $1); [ "$b" = "$a" ] && return; a=$b; sleep 3; done; }
