//! x_tables (iptables-legacy and friends): read a table through getsockopt, decode it, diff it.
