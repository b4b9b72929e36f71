//! A small file system for the record, to fill up: a tmpfs of a given size mounted on a
//! temporary directory, unmounted when dropped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// A tmpfs mounted on a directory of its own.
pub struct SmallFs {
    /// Holds the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
    mnt: PathBuf,
}

impl SmallFs {
    /// Mount a tmpfs of `size` (`mount`'s form: `8m`).
    pub fn mount(size: &str) -> SmallFs {
        let dir = tempfile::tempdir().expect("tempdir");
        let mnt = dir.path().join("small");
        std::fs::create_dir(&mnt).expect("mount point");
        crate::run(
            "mount",
            &[
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size}"),
                "tmpfs",
                mnt.to_str().expect("utf-8 path"),
            ],
        );
        SmallFs { _dir: dir, mnt }
    }

    /// The mounted directory.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        // Unmounted before the directory under it is removed (fields drop after this).
        let _ = Command::new("umount").arg(&self.mnt).status();
    }
}

/// Fill the file system of `path` with the file `path`, leaving `leave` bytes free.
pub fn fill(path: &Path, leave: u64) {
    let mut f = std::fs::File::create(path).expect("create the filler");
    let block = vec![0u8; 64 * 1024];
    while f.write_all(&block).is_ok() {}
    let len = f.metadata().expect("the filler's size").len();
    f.set_len(len.saturating_sub(leave))
        .expect("shorten the filler");
}

/// An iptables-legacy-restore script adding `n` rules to a new filter chain.
pub fn legacy_rules(chain: &str, n: usize) -> String {
    let mut script = format!("*filter\n:{chain} - [0:0]\n");
    for i in 0..n {
        script.push_str(&format!(
            "-A {chain} -s 10.{}.{}.{}/32 -p tcp -m tcp --dport {} -m comment --comment \
             \"padding padding padding\" -j ACCEPT\n",
            i / 65536,
            i / 256 % 256,
            i % 256,
            1 + i % 65000
        ));
    }
    script.push_str("COMMIT\n");
    script
}
