//! nf_tables: subscribe to nfnetlink notifications, dump a ruleset, decode and render objects.
