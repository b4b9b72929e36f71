use super::*;

#[test]
fn a_host_with_cgroup2_only_is_told_from_one_with_v1_hierarchies() {
    assert!(only_cgroup2("0::/system.slice/kubelet.service\n"));
    assert!(!only_cgroup2(
        "12:memory:/kubepods/pod1\n1:name=systemd:/kubepods/pod1\n0::/\n"
    ));
    assert!(!only_cgroup2(""));
}

const CID: &str = "4f6c2b5a8e1d0c9b7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a09";
const UID: &str = "8d1c6f3e-2b7a-4c9d-9e1f-0a2b3c4d5e6f";

fn pod(qos: Qos) -> Option<Pod> {
    Some(Pod {
        uid: UID.into(),
        qos,
        namespace: None,
        name: None,
        container: None,
    })
}

#[test]
fn systemd_units() {
    let w = parse_path("/system.slice/kubelet.service");
    assert_eq!(w.unit.as_deref(), Some("kubelet.service"));
    assert_eq!(w.container_id, None);
    assert_eq!(w.pod, None);
    assert_eq!(
        parse_path("/system.slice/iptables.service").unit.as_deref(),
        Some("iptables.service")
    );
    assert_eq!(
        parse_path("/system.slice/firewalld.service")
            .unit
            .as_deref(),
        Some("firewalld.service")
    );
    assert_eq!(
        parse_path("/user.slice/user-1000.slice/session-3.scope")
            .unit
            .as_deref(),
        Some("session-3.scope")
    );
    assert_eq!(parse_path("/"), Workload::default());
}

#[test]
fn kubelet_systemd_driver() {
    let u = UID.replace('-', "_");
    for (slice, qos) in [
        (
            format!("kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"),
            Qos::Burstable,
        ),
        (
            format!("kubepods-besteffort.slice/kubepods-besteffort-pod{u}.slice"),
            Qos::Besteffort,
        ),
        (format!("kubepods-pod{u}.slice"), Qos::Guaranteed),
    ] {
        for (scope, id) in [
            (format!("cri-containerd-{CID}.scope"), CID),
            (format!("crio-{CID}.scope"), CID),
            (format!("docker-{CID}.scope"), CID),
        ] {
            let path = format!("/kubepods.slice/{slice}/{scope}");
            let w = parse_path(&path);
            assert_eq!(w.container_id.as_deref(), Some(id), "{path}");
            assert_eq!(w.pod, pod(qos), "{path}");
            assert_eq!(w.unit.as_deref(), Some(scope.as_str()), "{path}");
        }
    }
    // The pod's own slice (a writer in the pod sandbox's cgroup): pod, no container.
    let w = parse_path(&format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u}.slice"
    ));
    assert_eq!(w.pod, pod(Qos::Burstable));
    assert_eq!(w.container_id, None);
}

#[test]
fn kind_node_nesting_picks_the_innermost_container() {
    let u = UID.replace('-', "_");
    let node = "a".repeat(64);
    let path = format!(
        "/system.slice/docker-{node}.scope/kubelet.slice/kubelet-kubepods.slice/\
         kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod{u}.slice/\
         cri-containerd-{CID}.scope"
    );
    let w = parse_path(&path);
    assert_eq!(w.container_id.as_deref(), Some(CID));
    assert_eq!(w.pod, pod(Qos::Besteffort));
}

#[test]
fn kubelet_cgroupfs_driver() {
    for (mid, qos) in [
        ("burstable/", Qos::Burstable),
        ("besteffort/", Qos::Besteffort),
        ("", Qos::Guaranteed),
    ] {
        for leaf in [CID.to_string(), format!("crio-{CID}")] {
            let path = format!("/kubepods/{mid}pod{UID}/{leaf}");
            let w = parse_path(&path);
            assert_eq!(w.container_id.as_deref(), Some(CID), "{path}");
            assert_eq!(w.pod, pod(qos), "{path}");
            assert_eq!(w.unit, None, "{path}");
        }
    }
    // Static pods carry a 32-hex config hash as uid.
    let hash = "0123456789abcdef0123456789abcdef";
    let w = parse_path(&format!("/kubepods/burstable/pod{hash}/{CID}"));
    assert_eq!(w.pod.map(|p| p.uid).as_deref(), Some(hash));
}

#[test]
fn docker_and_podman() {
    let w = parse_path(&format!("/docker/{CID}"));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    assert_eq!(w.pod, None);
    let w = parse_path(&format!("/system.slice/docker-{CID}.scope"));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    assert_eq!(w.unit, Some(format!("docker-{CID}.scope")));
    let w = parse_path(&format!(
        "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{CID}.scope/container"
    ));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    let w = parse_path(&format!("/machine.slice/libpod-{CID}.scope"));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    let w = parse_path(&format!("/libpod_parent/libpod-{CID}"));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    // conmon is the monitor, not the container.
    let w = parse_path(&format!("/machine.slice/libpod-conmon-{CID}.scope"));
    assert_eq!(w.container_id, None);
    let w = parse_path(&format!("/system.slice/crio-conmon-{CID}.scope"));
    assert_eq!(w.container_id, None);
}

#[test]
fn garbage_does_not_panic_or_invent() {
    for p in [
        "",
        "/",
        "//////",
        "pod",
        "/pod",
        "/kubepods",
        "/kubepods/pod",
        "/kubepods/burstable/pod",
        "/kubepods/burstable/podxyz/abc",
        "kubepods-.slice",
        "kubepods-pod.slice",
        "/kubepods.slice/kubepods-burstable-pod.slice/cri-containerd-.scope",
        "/kubepods.slice/kubepods-pod\u{e9}\u{e9}.slice/crio-\u{1F600}.scope",
        "/docker/",
        "/docker/zzzz",
        "/docker/abc",
        "cri-containerd-",
        ".scope",
        ".service",
        "\\\\\0\0",
        "/a/b/c/d/e/f/g/h/i/j/k/l/m/n/o/p/q/r/s/t/u/v/w/x/y/z",
    ] {
        let w = parse_path(p);
        assert_eq!(w.container_id, None, "{p:?}");
        assert_eq!(w.pod, None, "{p:?}");
    }
    // Long and random inputs.
    let long = "/x".repeat(100_000);
    assert_eq!(parse_path(&long), Workload::default());
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..2000 {
        let s: String = (0..64)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                b"/-_.kubepodsscopeslice0123456789abcdef"[(seed % 38) as usize] as char
            })
            .collect();
        let _ = parse_path(&s);
        let _ = workload_of_proc_cgroup(&s);
    }
    assert_eq!(
        workload_of_proc_cgroup("garbage\n::\n0:"),
        Workload::default()
    );
}

#[test]
fn proc_cgroup_uses_v2_then_v1() {
    let v2 = format!("0::/kubepods/besteffort/pod{UID}/{CID}\n");
    let w = workload_of_proc_cgroup(&v2);
    assert_eq!(w.container_id.as_deref(), Some(CID));
    assert_eq!(w.pod, pod(Qos::Besteffort));
    // Hybrid: v2 says only the runtime's unit; v1 names the container.
    let hybrid = format!(
        "12:memory:/kubepods/pod{UID}/{CID}\n1:name=systemd:/system.slice/containerd.service\n\
         0::/system.slice/containerd.service\n"
    );
    let w = workload_of_proc_cgroup(&hybrid);
    assert_eq!(w.unit.as_deref(), Some("containerd.service"));
    assert_eq!(w.container_id.as_deref(), Some(CID));
    assert_eq!(w.pod, pod(Qos::Guaranteed));
}

#[test]
fn mountinfo_finds_cgroup2_wherever_it_is() {
    let hybrid = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
         40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
         41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
    assert_eq!(
        cgroup2_mount(hybrid),
        Some(PathBuf::from("/sys/fs/cgroup/unified"))
    );
    let pure = "30 23 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw,nsdelegate\n";
    assert_eq!(cgroup2_mount(pure), Some(PathBuf::from("/sys/fs/cgroup")));
    let ns_and_host = "50 40 0:26 /kubepods.slice/x /sys/fs/cgroup ro - cgroup2 cgroup2 rw\n\
         51 40 0:26 / /host/cg\\040roup ro - cgroup2 cgroup2 rw\n";
    assert_eq!(
        cgroup2_mount(ns_and_host),
        Some(PathBuf::from("/host/cg roup"))
    );
    assert_eq!(cgroup2_mount("nonsense\n - \n1 2 3\n"), None);
}

/// Needs root and a writable cgroup2 hierarchy; skips otherwise.
#[test]
fn ids_resolve_to_paths_without_a_process() {
    use std::os::unix::fs::MetadataExt;
    let r = resolver();
    let Some(mount) = r.mount() else {
        test_support::skip(format_args!("no cgroup2 mount"));
        return;
    };
    let dir = mount.join(format!("observer-unit-{}", std::process::id()));
    let leaf = dir.join(format!("kubepods/besteffort/pod{UID}/{CID}"));
    if fs::create_dir_all(&leaf).is_err() {
        test_support::skip(format_args!(
            "cannot create cgroups under {}",
            mount.display()
        ));
        return;
    }
    let id = fs::metadata(&leaf).unwrap().ino();
    let by_handle = r.path_by_handle(id);
    let by_walk = r.path_by_walk(id);
    let got = r.resolve(id);
    let _ = fs::remove_dir(&leaf);
    for d in leaf.ancestors().skip(1) {
        if d == mount {
            break;
        }
        let _ = fs::remove_dir(d);
    }
    let want = format!(
        "/observer-unit-{}/kubepods/besteffort/pod{UID}/{CID}",
        std::process::id()
    );
    assert_eq!(by_walk.as_deref(), Some(want.as_str()));
    if by_handle.is_none() {
        println!("note: open_by_handle_at does not resolve kernfs ids here; the walk does");
    } else {
        assert_eq!(by_handle.as_deref(), Some(want.as_str()));
    }
    let got = got.expect("resolved");
    assert_eq!(got.path, want);
    assert_eq!(got.workload.container_id.as_deref(), Some(CID));
    // The cache keeps the answer after the cgroup is gone.
    assert_eq!(r.resolve(id).map(|g| g.path.clone()), Some(want));
    assert_eq!(r.resolve(u64::MAX - 5), None);
}
