use super::*;

#[test]
fn front_ends_are_recognised() {
    for c in [
        "iptables",
        "iptables-legacy",
        "iptables-restor",
        "ip6tables-legac",
        "xtables-nft-mul",
        "nft",
        "arptables",
        "ebtables-legacy",
        "ipset",
        "iptables-nft-re",
        "ip6tables-resto",
        "iptables-save",
        "arptables-nft-r",
        "ebtables-restor",
    ] {
        assert!(is_front_end(c), "{c}");
    }
    for c in [
        "kube-proxy",
        "kubelet",
        "calico-node",
        "nftables-tool",
        "bash",
        "ip",
        "iptables.init",
        "iptables-reset",
        "ip6tables-flush",
        "nft-reload",
        "ipsetd",
    ] {
        assert!(!is_front_end(c), "{c}");
    }
}

#[test]
fn actor_is_the_nearest_non_front_end() {
    assert_eq!(
        pick_actor([
            "iptables-restor",
            "iptables",
            "kube-proxy",
            "containerd-shim"
        ]),
        Some("kube-proxy")
    );
    assert_eq!(pick_actor(["kubelet"]), Some("kubelet"));
    assert_eq!(pick_actor(["nft", ""]), None);
}

#[test]
fn the_actor_is_found_above_shells_interpreters_and_wrappers() {
    let idx = |c: &[&str]| actor_index(c.iter().copied());
    // fail2ban's actions run through `sh -c`.
    assert_eq!(
        idx(&["iptables", "sh", "fail2ban-server", "systemd"]),
        Some(2)
    );
    // Wrappers of every kind, then the component.
    assert_eq!(
        idx(&[
            "iptables-restor",
            "flock",
            "timeout",
            "python3.11",
            "kube-proxy"
        ]),
        Some(4)
    );
    // ufw's init script is a component of its own name (the owners catalog maps it to ufw).
    assert_eq!(idx(&["iptables-restor", "ufw-init", "ufw"]), Some(1));
    // An admin's shell: the wrapper right below the session.
    assert_eq!(
        idx(&["iptables", "bash", "sshd", "sshd", "systemd"]),
        Some(1)
    );
    assert_eq!(idx(&["nft", "sh", ""]), Some(1));
    // Only front ends and wrappers so far, and more to read: not decided.
    assert_eq!(idx(&["iptables", "sh", "timeout"]), None);
    assert_eq!(pick_actor(["iptables", "sh", "timeout"]), Some("sh"));
    assert!(is_wrapper("python3") && is_wrapper("python3.12") && !is_wrapper("pythonista"));
}

#[test]
fn kernel_attribution_gives_the_ancestry_through_the_actor_and_on() {
    let mut p = KernelProcess {
        tgid: 10,
        tid: 10,
        uid: 0,
        comm: "iptables".into(),
        cgroup_id: 0,
        netns: 0,
        top_reached: true,
        ancestors: ["sh", "timeout", "kube-proxy", "containerd-shim", "systemd"]
            .iter()
            .enumerate()
            .map(|(i, c)| KernelAncestor {
                tgid: 20 + i as u32,
                comm: c.to_string(),
            })
            .collect(),
    };
    let info = from_kernel(&p);
    assert_eq!(info.actor, "kube-proxy");
    assert_eq!(info.parent_comm.as_deref(), Some("sh"));
    let got: Vec<(&str, u32)> = info
        .ancestry
        .iter()
        .map(|a| (a.comm.as_str(), a.pid))
        .collect();
    assert_eq!(
        got,
        vec![
            ("sh", 20),
            ("timeout", 21),
            ("kube-proxy", 22),
            ("containerd-shim", 23),
            ("systemd", 24)
        ]
    );
    // The writer itself the actor: its ancestry is still shown.
    p.comm = "kube-proxy".into();
    let info = from_kernel(&p);
    assert_eq!(info.actor, "kube-proxy");
    assert_eq!(info.ancestry.len(), 5);
}

#[test]
fn a_script_a_dispatcher_runs_is_named_after_the_tool_that_ran_it() {
    let idx = |c: &[&str]| actor_index(c.iter().copied());
    // `netfilter-persistent reload`: run-parts runs its plugins.d scripts.
    let nfp = [
        "iptables-restor",
        "15-ip4tables",
        "run-parts",
        "netfilter-persi",
        "sshd",
    ];
    assert_eq!(idx(&nfp), Some(3));
    // From cron: nothing above run-parts is a component, the script is the actor.
    assert_eq!(
        idx(&["iptables", "sh", "50-rules", "run-parts", "cron", ""]),
        Some(2)
    );
    // An admin's shell ran run-parts: the shell, as for any command it runs.
    assert_eq!(
        idx(&["iptables", "50-rules", "run-parts", "bash", "sshd"]),
        Some(3)
    );
    // The dispatcher's parent not read yet: not decided.
    assert_eq!(idx(&["iptables", "50-rules", "run-parts"]), None);
    // A component's parent is no dispatcher: as before.
    assert_eq!(idx(&["iptables", "kube-proxy", "containerd-shim"]), Some(1));

    let p = KernelProcess {
        tgid: 10,
        tid: 10,
        uid: 0,
        comm: nfp[0].into(),
        cgroup_id: 0,
        netns: 0,
        top_reached: true,
        ancestors: nfp[1..]
            .iter()
            .enumerate()
            .map(|(i, c)| KernelAncestor {
                // Pids no process has: the names cannot be completed from /proc.
                tgid: u32::MAX - 10 + i as u32,
                comm: c.to_string(),
            })
            .collect(),
    };
    let info = from_kernel(&p);
    assert_eq!(info.actor, "netfilter-persistent");
    let got: Vec<&str> = info.ancestry.iter().map(|a| a.comm.as_str()).collect();
    assert_eq!(got, &nfp[1..]);
    // The walk's map: run-parts is a dispatcher, sh a wrapper.
    let kinds = walk_past();
    let kind = |name: &str| {
        kinds
            .iter()
            .find(|(k, _)| k.starts_with(name.as_bytes()) && k[name.len()] == 0)
            .map(|(_, v)| *v)
    };
    assert_eq!(
        kind("run-parts"),
        Some(observer_common::process::WALK_DISPATCHER)
    );
    assert_eq!(kind("sh"), Some(observer_common::process::WALK_WRAPPER));
    assert_eq!(kind("kube-proxy"), None);
}

#[test]
fn a_name_longer_than_its_comm_is_read_from_the_command_line() {
    let script = b"/bin/sh\0/usr/sbin/netfilter-persistent\0reload\0";
    assert_eq!(
        cmdline_name(script, "netfilter-persi").as_deref(),
        Some("netfilter-persistent")
    );
    assert_eq!(cmdline_name(b"/usr/bin/kube-proxy\0", "kube-proxy"), None);
    assert_eq!(cmdline_name(b"\xff\xfe\0", "netfilter-persi"), None);
    // A process that is gone: a name known to be longer, else its comm.
    assert_eq!(
        long_name(u32::MAX - 1, "netfilter-persi"),
        "netfilter-persistent"
    );
    assert_eq!(
        long_name(u32::MAX - 1, "some-long-daemo"),
        "some-long-daemo"
    );
    assert_eq!(long_name(u32::MAX - 1, "kube-proxy"), "kube-proxy");
}

#[test]
fn kernel_attribution_names_parent_and_actor() {
    let p = KernelProcess {
        tgid: 10,
        tid: 11,
        uid: 0,
        comm: "iptables-legacy".into(),
        ancestors: vec![
            KernelAncestor {
                tgid: 9,
                comm: "kube-proxy".into(),
            },
            KernelAncestor {
                tgid: 1,
                comm: "systemd".into(),
            },
        ],
        netns: 1,
        cgroup_id: 77,
        top_reached: true,
    };
    let info = from_kernel(&p);
    assert_eq!(info.pid, 10);
    assert_eq!(info.ppid, Some(9));
    assert_eq!(info.parent_comm.as_deref(), Some("kube-proxy"));
    assert_eq!(info.actor, "kube-proxy");
    assert_eq!(info.cgroup, Some(77));
}

#[test]
fn a_live_thread_is_resolved_from_proc() {
    let me = std::process::id();
    let comm = read_comm(me).unwrap();
    let info = from_tid(me, &comm);
    assert_eq!(info.pid, me);
    assert!(info.ppid.is_some());
    assert!(info.parent_comm.is_some());
}

#[test]
fn a_gone_thread_is_honestly_unknown() {
    // pid_max is at most 2^22: this tid cannot exist.
    let info = from_tid(u32::MAX - 1, "nft");
    assert_eq!(info.ppid, None);
    assert_eq!(info.parent_comm, None);
    assert_eq!(info.actor, "unknown");
    let info = from_tid(u32::MAX - 1, "kube-proxy");
    assert_eq!(info.actor, "kube-proxy");
}

#[test]
fn workload_fields_are_written_only_when_known() {
    let info = from_tid(u32::MAX - 1, "nft");
    let v = serde_json::to_value(&info).unwrap();
    for k in ["unit", "container_id", "pod"] {
        assert!(v.get(k).is_none(), "{k} in {v}");
    }
    let info = info.with_workload(cgroup::parse_path(
        "/kubepods/besteffort/pod0123456789abcdef0123456789abcdef/\
         0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ));
    let v = serde_json::to_value(&info).unwrap();
    assert_eq!(v["pod"]["qos"], "besteffort");
    assert_eq!(v["pod"]["uid"], "0123456789abcdef0123456789abcdef");
    assert!(v["pod"].get("name").is_none(), "{v}");
    assert_eq!(v["container_id"].as_str().map(str::len), Some(64));
    assert!(v.get("unit").is_none(), "{v}");
}

#[test]
fn a_plugin_its_tool_runs_straight_from_its_directory_is_named_after_the_tool() {
    let chain = |names: &[&str]| -> Vec<Ancestor> {
        names
            .iter()
            .enumerate()
            .map(|(i, c)| Ancestor {
                comm: c.to_string(),
                // Pids no process has: only the names can tell.
                pid: u32::MAX - 20 + i as u32,
            })
            .collect()
    };
    // An exited plugin in run-parts' numbered style, run by its tool.
    let c = chain(&["10-rules", "fwtool", "systemd"]);
    assert_eq!(past_plugin("iptables", &c, Some(1)), Some(2));
    // ...through a shell of the tool's.
    let c = chain(&["10-rules", "sh", "fwtool", "systemd"]);
    assert_eq!(past_plugin("iptables", &c, Some(1)), Some(3));
    // Run by an init system alone: the plugin is the actor.
    let c = chain(&["10-rules", "systemd"]);
    assert_eq!(past_plugin("iptables", &c, Some(1)), Some(1));
    // A script of another name, gone: its own actor.
    let c = chain(&["rules", "fwtool", "systemd"]);
    assert_eq!(past_plugin("iptables", &c, Some(1)), Some(1));
    // Under run-parts: the dispatcher's rule already decided.
    let c = chain(&["10-rules", "run-parts", "cron"]);
    assert_eq!(past_plugin("iptables", &c, Some(1)), Some(1));
    // No actor, or the writer itself: unchanged.
    assert_eq!(past_plugin("iptables", &c, None), None);
    assert_eq!(past_plugin("10-rules", &c, Some(0)), Some(0));
    assert!(numbered("15-ip4tables") && numbered("10-x"));
    assert!(!numbered("15-") && !numbered("-x") && !numbered("ip4tables") && !numbered("15x"));
}

#[test]
fn a_plugin_is_known_by_its_directory_while_it_lives_and_by_its_name_after() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let script = |rel: &str, body: &str| {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    };
    let settle = || std::thread::sleep(std::time::Duration::from_millis(300));
    // Alive in a plugin directory: a plugin, whatever its name.
    let mut alive = std::process::Command::new(script("tool/plugins.d/rules", "sleep 5"))
        .spawn()
        .unwrap();
    // Alive elsewhere, even with a numbered name: not one.
    let mut elsewhere = std::process::Command::new(script("tool/20-rules", "sleep 5"))
        .spawn()
        .unwrap();
    // Exited and not reaped yet (its command line reads empty): its numbered name tells.
    let mut exited = std::process::Command::new(script("tool/plugins.d/30-rules", "exit 0"))
        .spawn()
        .unwrap();
    settle();
    assert!(is_plugin(alive.id(), "rules"));
    assert!(!is_plugin(elsewhere.id(), "20-rules"));
    assert!(is_plugin(exited.id(), "30-rules"));
    for c in [&mut alive, &mut elsewhere] {
        let _ = c.kill();
    }
    for c in [&mut alive, &mut elsewhere, &mut exited] {
        let _ = c.wait();
    }
}
