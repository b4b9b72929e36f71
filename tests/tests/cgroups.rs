//! Unit, container and pod attribution from real cgroups: the test creates cgroups named as
//! kubelet (systemd and cgroupfs drivers) and systemd name them, under a parent of its own in the
//! cgroup v2 hierarchy, runs `iptables-legacy` inside each (in a namespace of its own), and checks
//! what `observer tail --json` says about the writer. The writers have exited by the time observer
//! looks them up: the fields come from the cgroup id the kernel captured. Needs root; skips
//! otherwise, or when the cgroup2 hierarchy cannot be written.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;
use test_support::{change, skip_unless, Netns, Observer};

const WAIT: u64 = 20;

/// The cgroup2 mount point, from mountinfo (the hierarchy's root mount if there are several).
fn cgroup2_mount() -> Option<PathBuf> {
    let text = fs::read_to_string("/proc/self/mountinfo").ok()?;
    text.lines().find_map(|l| {
        let (pre, post) = l.split_once(" - ")?;
        let f: Vec<&str> = pre.split(' ').collect();
        (post.starts_with("cgroup2 ") && f.get(3) == Some(&"/")).then(|| PathBuf::from(f[4]))
    })
}

/// A test-owned cgroup subtree, removed (deepest first) when dropped.
struct CgroupTree {
    top: PathBuf,
    made: Vec<PathBuf>,
}

impl CgroupTree {
    fn new(mount: &Path) -> Option<CgroupTree> {
        let top = mount.join(format!("observer-test-{}", std::process::id()));
        let _ = fs::remove_dir(&top);
        fs::create_dir(&top).ok()?;
        Some(CgroupTree {
            made: vec![top.clone()],
            top,
        })
    }

    /// Create `rel` (and its parents) below the top; returns the leaf.
    fn make(&mut self, rel: &str) -> PathBuf {
        let mut p = self.top.clone();
        for seg in rel.split('/') {
            p.push(seg);
            if !p.exists() {
                fs::create_dir(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
                self.made.push(p.clone());
            }
        }
        p
    }
}

impl Drop for CgroupTree {
    fn drop(&mut self) {
        for p in self.made.iter().rev() {
            let _ = fs::remove_dir(p);
        }
    }
}

/// Run `iptables-legacy ARGS` in `ns`, with the shell moving itself into `cgroup` first.
fn write_in_cgroup(ns: &Netns, cgroup: &Path, args: &str) {
    let script = format!(
        "echo $$ > '{}/cgroup.procs' && exec ip netns exec {} iptables-legacy {args}",
        cgroup.display(),
        ns.name()
    );
    test_support::run("sh", &["-c", &script]);
}

#[test]
fn writers_are_placed_in_their_unit_container_and_pod() {
    skip_unless!("ip", "iptables-legacy");
    let Some(mount) = cgroup2_mount() else {
        test_support::skip(format_args!("no cgroup2 file system is mounted"));
        return;
    };
    let Some(mut tree) = CgroupTree::new(&mount) else {
        test_support::skip(format_args!(
            "cannot create a cgroup under {}",
            mount.display()
        ));
        return;
    };
    let pid = std::process::id();
    // Real-looking ids that no other run shares.
    let uid1 = format!("{pid:08x}-1111-4a2b-9c3d-0e1f2a3b4c5d");
    let uid2 = format!("{pid:08x}-2222-4a2b-9c3d-0e1f2a3b4c5d");
    let cid1 = format!("{pid:08x}{}", "a1".repeat(28));
    let cid2 = format!("{pid:08x}{}", "b2".repeat(28));
    let u1 = uid1.replace('-', "_");
    let scope = format!("cri-containerd-{cid1}.scope");
    let systemd_driver = tree.make(&format!(
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{u1}.slice/{scope}"
    ));
    let cgroupfs_driver = tree.make(&format!("kubepods/besteffort/pod{uid2}/{cid2}"));
    let service = tree.make("system.slice/iptables.service");

    // kubelet's pod log layout and the runtime's container log links, for the first pod.
    let logs = tempfile::tempdir().expect("tempdir");
    let pod_logs = logs.path().join("pods");
    let container_logs = logs.path().join("containers");
    fs::create_dir_all(pod_logs.join(format!("kube-system_kube-proxy-x7k2p_{uid1}/kube-proxy")))
        .expect("pod log dir");
    fs::create_dir_all(&container_logs).expect("container log dir");
    fs::write(
        container_logs.join(format!(
            "kube-proxy-x7k2p_kube-system_kube-proxy-{cid1}.log"
        )),
        "",
    )
    .expect("container log link");

    let mut obs = Observer::start(&[
        "--pod-logs",
        pod_logs.to_str().expect("utf-8"),
        "--container-logs",
        container_logs.to_str().expect("utf-8"),
    ]);
    let ns = Netns::new("cgroup");
    let inode = ns.ino();
    let here = move |v: &Value| v["netns"].as_u64() == Some(inode);

    write_in_cgroup(&ns, &systemd_driver, "-N OBS-SYSTEMD");
    write_in_cgroup(&ns, &cgroupfs_driver, "-N OBS-CGROUPFS");
    write_in_cgroup(&ns, &service, "-N OBS-SERVICE");

    let v = obs.expect("chain_create OBS-SYSTEMD", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-SYSTEMD"))(v)
    });
    let p = &v["process"];
    assert_eq!(p["comm"], "iptables-legacy", "{v}");
    assert_eq!(p["container_id"], cid1.as_str(), "{v}");
    assert_eq!(p["pod"]["uid"], uid1.as_str(), "{v}");
    assert_eq!(p["pod"]["qos"], "burstable", "{v}");
    // Named from the node's logs, without an API server.
    assert_eq!(p["pod"]["namespace"], "kube-system", "{v}");
    assert_eq!(p["pod"]["name"], "kube-proxy-x7k2p", "{v}");
    assert_eq!(p["pod"]["container"], "kube-proxy", "{v}");
    assert_eq!(p["unit"], scope.as_str(), "{v}");
    assert!(p["cgroup"].as_u64().unwrap_or(0) > 1, "{v}");

    let v = obs.expect("chain_create OBS-CGROUPFS", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-CGROUPFS"))(v)
    });
    let p = &v["process"];
    assert_eq!(p["container_id"], cid2.as_str(), "{v}");
    assert_eq!(p["pod"]["uid"], uid2.as_str(), "{v}");
    assert_eq!(p["pod"]["qos"], "besteffort", "{v}");
    assert!(
        p["pod"].get("name").is_none() && p["pod"].get("container").is_none(),
        "no logs for this pod, no names: {v}"
    );
    assert!(p.get("unit").is_none(), "cgroupfs paths name no unit: {v}");

    let v = obs.expect("chain_create OBS-SERVICE", WAIT, |v| {
        here(v) && change("chain_create", Some("OBS-SERVICE"))(v)
    });
    let p = &v["process"];
    assert_eq!(p["unit"], "iptables.service", "{v}");
    assert!(p.get("container_id").is_none(), "{v}");
    assert!(p.get("pod").is_none(), "{v}");

    obs.stop();
    drop(ns);
    drop(tree);
}
