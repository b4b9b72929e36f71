//! Kernel struct offsets from the running kernel's BTF.
//!
//! Rust eBPF gets no CO-RE relocations, and the layout of `task_struct`, `nsproxy` and `net`
//! changes from one kernel to the next, so the offsets the programs read at are resolved here at
//! start-up and written into the programs' read-only data. A field this kernel lacks leaves that
//! piece of attribution empty, with a message, instead of reading garbage.
//! Needs `/sys/kernel/btf/vmlinux` (CONFIG_DEBUG_INFO_BTF, most distribution kernels since 5.4).

use std::path::Path;

use btf_rs::{Backend, Btf, Type};
use observer_common::{nfnl::NlOffsets, offsets::Offsets};

/// Where the running kernel publishes its BTF.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Why an offset could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum BtfError {
    /// The BTF file could not be read or parsed.
    #[error("cannot read kernel BTF from {path}: {source}")]
    Load {
        path: String,
        #[source]
        source: btf_rs::Error,
    },
    /// No struct of that name in the BTF.
    #[error("struct {0} not found in kernel BTF")]
    NoStruct(String),
    /// The struct has no member of that name (also searched inside anonymous members).
    #[error("struct {strukt} has no field {field} on this kernel")]
    NoField { strukt: String, field: String },
    /// The field is a bitfield or not byte aligned; the programs only read whole bytes.
    #[error("{strukt}.{field} is not byte aligned")]
    Unaligned { strukt: String, field: String },
}

/// The BTF of a kernel, with the look-ups the programs need.
pub struct KernelBtf {
    btf: Btf,
}

impl KernelBtf {
    /// Load the running kernel's BTF.
    pub fn running() -> Result<KernelBtf, BtfError> {
        KernelBtf::from_file(Path::new(VMLINUX_BTF))
    }

    /// The file is mapped when the kernel allows it (its BTF in sysfs can be mapped since 6.16):
    /// types are then read in place, and the 5 MB of a distribution kernel's BTF cost an index of
    /// their offsets instead of some 30 MB of parsed types, which were the agent's peak memory.
    /// Otherwise it is read and parsed whole.
    pub fn from_file(path: &Path) -> Result<KernelBtf, BtfError> {
        let btf = Btf::from_file_with_backend(path, Backend::Mmap)
            .or_else(|e| {
                tracing::debug!("{}: not mapped ({e}); reading it whole", path.display());
                Btf::from_file(path)
            })
            .map_err(|source| BtfError::Load {
                path: path.display().to_string(),
                source,
            })?;
        Ok(KernelBtf { btf })
    }

    /// Byte offset of `path` (a dotted member path, e.g. `ns.inum`) inside `struct strukt`.
    pub fn offset_of(&self, strukt: &str, path: &str) -> Result<u32, BtfError> {
        let mut ty = self.find_struct(strukt)?;
        let mut total_bits = 0u32;
        let mut current = strukt.to_string();
        for field in path.split('.') {
            let (bits, member_ty) =
                self.find_member(&ty, field)
                    .ok_or_else(|| BtfError::NoField {
                        strukt: current.clone(),
                        field: field.to_string(),
                    })?;
            total_bits += bits;
            ty = member_ty;
            current = format!("{current}.{field}");
        }
        if !total_bits.is_multiple_of(8) {
            return Err(BtfError::Unaligned {
                strukt: strukt.to_string(),
                field: path.to_string(),
            });
        }
        Ok(total_bits / 8)
    }

    fn find_struct(&self, name: &str) -> Result<Type, BtfError> {
        let types = self
            .btf
            .resolve_types_by_name(name)
            .map_err(|_| BtfError::NoStruct(name.to_string()))?;
        types
            .into_iter()
            .find(|t| matches!(t, Type::Struct(_)))
            .ok_or_else(|| BtfError::NoStruct(name.to_string()))
    }

    /// Follow typedefs and qualifiers to the underlying type.
    fn strip(&self, mut ty: Type) -> Option<Type> {
        for _ in 0..16 {
            match &ty {
                Type::Typedef(_)
                | Type::Const(_)
                | Type::Volatile(_)
                | Type::Restrict(_)
                | Type::TypeTag(_) => {
                    let bt = ty.as_btf_type()?;
                    ty = self.btf.resolve_chained_type(bt).ok()?;
                }
                _ => return Some(ty),
            }
        }
        None
    }

    /// Find `field` in a struct or union, looking inside anonymous struct/union members.
    /// Returns the bit offset from the start of `ty` and the member's (stripped) type.
    fn find_member(&self, ty: &Type, field: &str) -> Option<(u32, Type)> {
        let (Type::Struct(s) | Type::Union(s)) = self.strip(ty.clone())? else {
            return None;
        };
        for member in &s.members {
            let name = self.btf.resolve_name(member).unwrap_or_default();
            let member_ty = self
                .btf
                .resolve_chained_type(member)
                .ok()
                .and_then(|t| self.strip(t));
            if name == field {
                return Some((member.bit_offset(), member_ty?));
            }
            if name.is_empty() {
                if let Some(inner) = member_ty {
                    if let Some((bits, t)) = self.find_member(&inner, field) {
                        return Some((member.bit_offset() + bits, t));
                    }
                }
            }
        }
        None
    }
}

/// What the resolver found: the offsets, and one message per field it could not find.
pub struct Resolved {
    pub offsets: Offsets,
    pub missing: Vec<String>,
    /// Why `sock_net` could not be resolved; the kprobe and fentry x_tables hooks need it.
    pub sock_net_missing: Option<String>,
}

/// Resolve every offset the eBPF programs read.
pub fn resolve_offsets(btf: &KernelBtf) -> Resolved {
    let mut missing = Vec::new();
    let mut get = |strukt: &str, path: &str| match btf.offset_of(strukt, path) {
        Ok(off) => off,
        Err(e) => {
            missing.push(e.to_string());
            Offsets::MISSING
        }
    };
    let mut offsets = Offsets {
        task_real_parent: get("task_struct", "real_parent"),
        task_tgid: get("task_struct", "tgid"),
        task_comm: get("task_struct", "comm"),
        task_nsproxy: get("task_struct", "nsproxy"),
        nsproxy_net_ns: get("nsproxy", "net_ns"),
        net_ns_inum: get("net", "ns.inum"),
        valid: 0,
        sock_net: Offsets::MISSING,
        ..Offsets::unset()
    };
    offsets.valid = u32::from(missing.is_empty());
    // Names ancestors by their process, not their thread; a bonus like the command line.
    if let Ok(off) = btf.offset_of("task_struct", "group_leader") {
        offsets.task_group_leader = off;
    }
    // The command line is a bonus: without it, a flush and the delete of a chain's only rule
    // look the same, which the change line then says.
    if let (Ok(mm), Ok(start), Ok(end)) = (
        btf.offset_of("task_struct", "mm"),
        btf.offset_of("mm_struct", "arg_start"),
        btf.offset_of("mm_struct", "arg_end"),
    ) {
        offsets.task_mm = mm;
        offsets.mm_arg_start = start;
        offsets.mm_arg_end = end;
    }
    // possible_net_t holds one `struct net *net` (CONFIG_NET_NS); without it there is no field.
    let sock_net_missing = match btf.offset_of("sock", "__sk_common.skc_net.net") {
        Ok(off) => {
            offsets.sock_net = off;
            None
        }
        Err(e) => Some(e.to_string()),
    };
    Resolved {
        offsets,
        missing,
        sock_net_missing,
    }
}

/// What the resolver found for the netlink hook: the offsets (valid only when `missing` is
/// empty), and one message per field it could not find.
pub struct ResolvedNl {
    pub offsets: NlOffsets,
    pub missing: Vec<String>,
}

/// Resolve the offsets the `sendmsg`/`sendto` programs read to find the socket behind a file
/// descriptor. Any missing field leaves `valid` at 0: the hook is then not attached.
pub fn resolve_nl_offsets(btf: &KernelBtf) -> ResolvedNl {
    let mut missing = Vec::new();
    let mut get = |strukt: &str, path: &str| match btf.offset_of(strukt, path) {
        Ok(off) => off,
        Err(e) => {
            missing.push(e.to_string());
            u32::MAX
        }
    };
    let mut offsets = NlOffsets {
        task_files: get("task_struct", "files"),
        files_fdt: get("files_struct", "fdt"),
        fdt_max_fds: get("fdtable", "max_fds"),
        fdt_fd: get("fdtable", "fd"),
        file_inode: get("file", "f_inode"),
        inode_mode: get("inode", "i_mode"),
        file_private: get("file", "private_data"),
        socket_sk: get("socket", "sk"),
        sk_family: get("sock", "__sk_common.skc_family"),
        sk_protocol: get("sock", "sk_protocol"),
        sk_net: get("sock", "__sk_common.skc_net.net"),
        valid: 0,
        ..NlOffsets::unset()
    };
    offsets.valid = u32::from(missing.is_empty());
    // Each of these is needed by one kprobe/fentry hook only: its absence keeps that hook on the
    // tracepoint backend (the placement says why).
    let optional = |strukt: &str, path: &str, what: &str| match btf.offset_of(strukt, path) {
        Ok(off) => off,
        Err(e) => {
            tracing::debug!("{what}: {e}");
            u32::MAX
        }
    };
    offsets.skb_sk = optional("sk_buff", "sk", "refusal hook");
    offsets.skb_data = optional("sk_buff", "data", "nfnetlink hooks");
    offsets.skb_len = optional("sk_buff", "len", "nfnetlink hooks");
    offsets.path_dentry = optional("path", "dentry", "unmount hook");
    offsets.dentry_sb = optional("dentry", "d_sb", "unmount hook");
    offsets.sb_magic = optional("super_block", "s_magic", "unmount hook");
    ResolvedNl { offsets, missing }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Option<KernelBtf> {
        match KernelBtf::running() {
            Ok(b) => Some(b),
            Err(e) => {
                test_support::skip(format_args!("{e}"));
                None
            }
        }
    }

    #[test]
    fn resolves_every_field_on_the_running_kernel() {
        let Some(btf) = host() else { return };
        let r = resolve_offsets(&btf);
        assert!(r.missing.is_empty(), "missing: {:?}", r.missing);
        assert_eq!(r.offsets.valid, 1);
        // tgid follows pid in task_struct on every kernel since 2.6.
        let pid = btf.offset_of("task_struct", "pid").unwrap();
        assert_eq!(r.offsets.task_tgid, pid + 4);
        // net->ns is a struct ns_common; inum lies inside it.
        let ns = btf.offset_of("net", "ns").unwrap();
        let inum = btf.offset_of("ns_common", "inum").unwrap();
        assert_eq!(r.offsets.net_ns_inum, ns + inum);
    }

    /// Every field the programs read, checked against layout facts that hold on every kernel.
    fn check_kernel(name: &str, btf: &KernelBtf) {
        let r = resolve_offsets(btf);
        assert!(r.missing.is_empty(), "{name}: missing {:?}", r.missing);
        assert_eq!(r.offsets.valid, 1, "{name}");
        assert_eq!(r.sock_net_missing, None, "{name}");
        assert_ne!(
            r.offsets.task_mm,
            Offsets::MISSING,
            "{name}: task_struct.mm"
        );
        assert_eq!(
            r.offsets.mm_arg_end,
            r.offsets.mm_arg_start + 8,
            "{name}: mm_struct.arg_end follows arg_start"
        );
        let pid = btf.offset_of("task_struct", "pid").unwrap();
        assert_eq!(r.offsets.task_tgid, pid + 4, "{name}: tgid follows pid");
        let ns = btf.offset_of("net", "ns").unwrap();
        let inum = btf.offset_of("ns_common", "inum").unwrap();
        assert_eq!(r.offsets.net_ns_inum, ns + inum, "{name}");
        // struct sock starts with its sock_common, and skc_net lies in its first 64 bytes
        // (after the addresses, ports and hash) on every kernel since 2.6.
        let common = btf.offset_of("sock", "__sk_common").unwrap();
        assert_eq!(common, 0, "{name}");
        assert!(
            (8..64).contains(&r.offsets.sock_net),
            "{name}: sock.__sk_common.skc_net at {}",
            r.offsets.sock_net
        );
        let nl = resolve_nl_offsets(btf);
        assert!(nl.missing.is_empty(), "{name}: missing {:?}", nl.missing);
        // sk_buff starts with its list pointers and the socket follows them (a union with
        // the rbnode and list head: 24 bytes on 64-bit kernels).
        assert_eq!(nl.offsets.skb_sk, 24, "{name}: sk_buff.sk");
        // struct path is { struct vfsmount *mnt; struct dentry *dentry; }.
        assert_eq!(nl.offsets.path_dentry, 8, "{name}: path.dentry");
        // sk_buff.len (with the control block before it) comes before the data pointers at
        // its end on every kernel.
        assert_ne!(nl.offsets.skb_data, u32::MAX, "{name}: sk_buff.data");
        assert_ne!(nl.offsets.skb_len, u32::MAX, "{name}: sk_buff.len");
        assert!(
            nl.offsets.skb_len < nl.offsets.skb_data,
            "{name}: sk_buff.len"
        );
        assert_ne!(nl.offsets.dentry_sb, u32::MAX, "{name}: dentry.d_sb");
        assert_ne!(nl.offsets.sb_magic, u32::MAX, "{name}: super_block.s_magic");
        println!("{name}: {:?} {:?}", r.offsets, nl.offsets);
    }

    #[test]
    fn resolves_on_every_kernel_btf_given() {
        // OBSERVER_KERNEL_BTF: more kernels' BTF files (colon-separated), e.g. the one
        // `cargo xtask vm-test` copies out of its guest.
        let extra = std::env::var("OBSERVER_KERNEL_BTF").unwrap_or_default();
        let mut checked = 0;
        if let Some(btf) = host() {
            check_kernel("running kernel", &btf);
            checked += 1;
        }
        for path in extra.split(':').filter(|p| !p.is_empty()) {
            match KernelBtf::from_file(Path::new(path)) {
                Ok(btf) => {
                    check_kernel(path, &btf);
                    checked += 1;
                }
                Err(e) => println!("skipping {path}: {e}"),
            }
        }
        if extra.is_empty() {
            println!(
                "only the running kernel checked: set OBSERVER_KERNEL_BTF to other kernels' BTF \
                 (cargo xtask vm-test does, with its guest's)"
            );
        }
        println!("{checked} kernels checked");
    }

    #[test]
    fn resolves_the_socket_path_on_the_running_kernel() {
        let Some(btf) = host() else { return };
        let r = resolve_nl_offsets(&btf);
        assert!(r.missing.is_empty(), "missing: {:?}", r.missing);
        assert_eq!(r.offsets.valid, 1);
        // skc_family and skc_net both live in sock_common, at the start of struct sock.
        let common = btf.offset_of("sock", "__sk_common").unwrap();
        assert_eq!(common, 0);
        assert!(r.offsets.sk_protocol > r.offsets.sk_net);
    }

    #[test]
    fn unknown_fields_and_structs_are_errors() {
        let Some(btf) = host() else { return };
        assert!(matches!(
            btf.offset_of("task_struct", "no_such_field"),
            Err(BtfError::NoField { .. })
        ));
        assert!(matches!(
            btf.offset_of("no_such_struct_xyz", "x"),
            Err(BtfError::NoStruct(_))
        ));
    }

    #[test]
    fn finds_fields_in_anonymous_members() {
        let Some(btf) = host() else { return };
        // ns_common.ns_id sits in an anonymous union/struct on recent kernels, and directly in
        // older ones: both must resolve.
        if btf.offset_of("ns_common", "inum").is_ok() {
            // sk_buff.len is inside no anonymous member, sk_buff.dev is inside an anonymous
            // union of a struct: a long-standing layout.
            let dev = btf.offset_of("sk_buff", "dev").unwrap();
            assert!(dev > 0 && dev < 64, "sk_buff.dev at {dev}");
        }
    }

    #[test]
    fn a_missing_file_is_a_clear_error() {
        let err = KernelBtf::from_file(Path::new("/nonexistent/vmlinux"))
            .err()
            .unwrap();
        assert!(err.to_string().contains("/nonexistent/vmlinux"));
    }
}
