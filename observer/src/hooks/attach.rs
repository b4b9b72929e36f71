//! Putting a hook's programs on the kernel: each [`Hook`] on the best backend that attaches
//! (or the one asked for), with the kernel's reason when one is refused, kept in the
//! [`Placement`]. What the hooks and backends are is in `backend`.

use aya::programs::{FEntry, FExit, KProbe, ProgramError, TracePoint};
use aya::{Btf, BtfError, Ebpf};

use super::backend::{Attach, Hook, HookBackend, Needs, Placement, Refusal, KPROBE_PMU};
use super::{error_chain, HookError};

/// Attach one tracepoint program (loading it first if needed).
pub fn attach_tracepoint(
    ebpf: &mut Ebpf,
    prog: &str,
    category: &str,
    name: &str,
) -> Result<(), HookError> {
    let program: &mut TracePoint = ebpf
        .program_mut(prog)
        .ok_or_else(|| HookError::Load(format!("program {prog} missing from the object")))?
        .try_into()
        .map_err(|e: aya::programs::ProgramError| HookError::Load(error_chain(&e)))?;
    if program.fd().is_err() {
        program
            .load()
            .map_err(|e| HookError::Load(format!("{prog}: {}", error_chain(&e))))?;
    }
    program
        .attach(category, name)
        .map_err(|e| HookError::Attach {
            category: category.to_string(),
            name: name.to_string(),
            reason: error_chain(&e),
        })?;
    Ok(())
}

/// Why a hook's program could not be put on a backend: the reason kept in the placement (see
/// [`Refusal`]) and given when the backend was asked for. The loader's and the kernel's errors
/// are in the message with their causes, as the ready line shows them.
#[derive(Debug, thiserror::Error)]
enum AttachError {
    /// The kernel's BTF, which trampoline programs need, cannot be read.
    #[error("kernel BTF unavailable: {}", error_chain(.0))]
    Btf(#[source] BtfError),
    /// The object has no program of that name and type.
    #[error("program {0} missing from the object")]
    Missing(&'static str),
    /// The kernel refused to load the program for that function.
    #[error("loading {kind} on {function}: {}", error_chain(.cause))]
    Load {
        kind: &'static str,
        function: &'static str,
        #[source]
        cause: ProgramError,
    },
    /// The loaded program could not be attached to the function.
    #[error("attaching {kind} to {function}: {}", error_chain(.cause))]
    Attach {
        kind: &'static str,
        function: &'static str,
        #[source]
        cause: ProgramError,
    },
    /// A kprobe could not be attached on a kernel built without kprobes.
    #[error(
        "attaching {kind} to {function}: {} (this kernel has no kprobe PMU: built without \
         CONFIG_KPROBES)",
        error_chain(.cause)
    )]
    NoKprobes {
        kind: &'static str,
        function: &'static str,
        #[source]
        cause: ProgramError,
    },
    /// A tracepoint program could not be loaded or attached.
    #[error(transparent)]
    Tracepoint(#[from] HookError),
    /// A struct field the backend's programs read is not known on this kernel.
    #[error("a field its programs read is unknown ({0})")]
    Blocked(String),
    /// The hook has no program for this backend.
    #[error("no program for this backend")]
    NoProgram,
}

/// The kernel's BTF, parsed once for every trampoline program (the caller puts it back).
fn take_btf(btf: &mut Option<Btf>) -> Result<Btf, AttachError> {
    match btf.take() {
        Some(b) => Ok(b),
        None => Btf::from_sys_fs().map_err(AttachError::Btf),
    }
}

/// Attach one program; on failure the loader's or the kernel's reason.
fn attach_one(ebpf: &mut Ebpf, a: Attach, btf: &mut Option<Btf>) -> Result<(), AttachError> {
    match a {
        Attach::Fentry(prog, function) => {
            let b = take_btf(btf)?;
            let program: &mut FEntry = typed(ebpf, prog).ok_or(AttachError::Missing(prog))?;
            let loaded = program
                .load(function, &b)
                .map_err(|cause| AttachError::Load {
                    kind: "fentry",
                    function,
                    cause,
                });
            *btf = Some(b);
            loaded?;
            program.attach().map_err(|cause| AttachError::Attach {
                kind: "fentry",
                function,
                cause,
            })?;
        }
        Attach::Fexit(prog, function) => {
            let b = take_btf(btf)?;
            let program: &mut FExit = typed(ebpf, prog).ok_or(AttachError::Missing(prog))?;
            let loaded = program
                .load(function, &b)
                .map_err(|cause| AttachError::Load {
                    kind: "fexit",
                    function,
                    cause,
                });
            *btf = Some(b);
            loaded?;
            program.attach().map_err(|cause| AttachError::Attach {
                kind: "fexit",
                function,
                cause,
            })?;
        }
        Attach::Kprobe(prog, function) => attach_kprobe(ebpf, prog, "kprobe", function)?,
        Attach::Kretprobe(prog, function) => attach_kprobe(ebpf, prog, "kretprobe", function)?,
        Attach::Tracepoint(prog, category, name) => attach_tracepoint(ebpf, prog, category, name)?,
    }
    Ok(())
}

/// Put every program of `hook` on `backend`; on failure unload what was attached (so nothing
/// is reported twice) and return the reason.
fn attach_on(
    ebpf: &mut Ebpf,
    hook: &Hook,
    backend: HookBackend,
    needs: &Needs,
    btf: &mut Option<Btf>,
    attached: &mut Vec<String>,
) -> Result<(), AttachError> {
    if backend != HookBackend::Tracepoint {
        if let Some(why) = needs.blocker(hook) {
            return Err(AttachError::Blocked(why.to_string()));
        }
    }
    let programs = hook.on(backend);
    if programs.is_empty() {
        return Err(AttachError::NoProgram);
    }
    let mut mine = Vec::new();
    for &a in programs {
        if let Err(reason) = attach_one(ebpf, a, btf) {
            unload(ebpf, programs);
            return Err(reason);
        }
        mine.push(a.name());
    }
    attached.extend(mine);
    Ok(())
}

/// Places hooks on one loaded object: the backend asked for, what blocks a backend on this
/// kernel, the kernel's BTF (parsed once), and where the results go.
pub struct Placer<'a> {
    pub ebpf: &'a mut Ebpf,
    /// The backend asked for (`--hooks kprobe`); `None` tries the best first.
    pub only: Option<HookBackend>,
    pub needs: Needs<'a>,
    pub btf: Option<Btf>,
    pub placement: &'a mut Placement,
    pub attached: &'a mut Vec<String>,
}

impl Placer<'_> {
    /// Place `hook`: on `only` when given, else on the best backend that attaches. With
    /// `strict` nothing else is tried and the failure is returned (the x_tables hook: asking for
    /// a backend means proving it); otherwise the tracepoint backend is the fallback, and a hook
    /// that attaches nowhere is left off with its reasons in the placement.
    pub fn place(&mut self, hook: &Hook, strict: bool) -> Result<(), HookError> {
        let mut candidates: Vec<HookBackend> = match self.only {
            Some(b) => vec![b],
            None => HookBackend::BEST_FIRST.to_vec(),
        };
        if !strict && !candidates.contains(&HookBackend::Tracepoint) {
            candidates.push(HookBackend::Tracepoint);
        }
        self.place_on(hook, candidates, strict, self.only.is_some())
    }

    /// Place `hook`, which the backend asked for refused (`reason`) although it carries the
    /// other hooks on this kernel: the kernel refuses that one function there (5.10's
    /// trampolines take no struct argument, and `nf_setsockopt` takes one). The refusal is kept
    /// for the ready line and `doctor`, and the hook goes on the next backend that attaches.
    pub fn place_after_refusal(
        &mut self,
        hook: &Hook,
        refused: HookBackend,
        reason: String,
    ) -> Result<(), HookError> {
        tracing::warn!(
            "{} hook: {} refused ({reason}); the other hooks are on {}, this one goes on the \
             next backend",
            hook.name,
            refused.as_str(),
            refused.as_str()
        );
        self.placement.refused.push(Refusal {
            hook: hook.name,
            backend: refused,
            reason,
        });
        let next: Vec<HookBackend> = HookBackend::BEST_FIRST
            .into_iter()
            .skip_while(|b| *b != refused)
            .skip(1)
            .collect();
        self.place_on(hook, next, true, false)
    }

    /// Try `candidates` in order; `fail_fast`: the first failure is the error.
    fn place_on(
        &mut self,
        hook: &Hook,
        candidates: Vec<HookBackend>,
        strict: bool,
        fail_fast: bool,
    ) -> Result<(), HookError> {
        for backend in candidates {
            if backend == HookBackend::Tracepoint && hook.tracepoint.is_empty() {
                continue;
            }
            match attach_on(
                self.ebpf,
                hook,
                backend,
                &self.needs,
                &mut self.btf,
                self.attached,
            ) {
                Ok(()) => {
                    *self.placement.slot(hook) = Some(backend);
                    return Ok(());
                }
                Err(e) => {
                    let reason = tidy_reason(&e.to_string());
                    if strict && fail_fast {
                        return Err(HookError::Backend {
                            backend: backend.as_str(),
                            reason,
                        });
                    }
                    tracing::info!("{} hook: {} refused: {reason}", hook.name, backend.as_str());
                    self.placement.refused.push(Refusal {
                        hook: hook.name,
                        backend,
                        reason,
                    });
                }
            }
        }
        if strict {
            let last = self
                .placement
                .refused
                .last()
                .map(|r| r.reason.clone())
                .unwrap_or_default();
            return Err(HookError::Backend {
                backend: "any",
                reason: last,
            });
        }
        Ok(())
    }
}

/// A refusal as the ready line and `doctor` give it: the verifier's statistics (time, stack
/// depth, instructions processed) dropped, and a kernel's refusal of a struct argument (5.10's
/// trampolines) said in words.
fn tidy_reason(reason: &str) -> String {
    let mut s: String = reason
        .lines()
        .filter(|l| {
            !(l.starts_with("verification time")
                || l.starts_with("stack depth")
                || l.starts_with("processed ")
                || l.trim().is_empty())
        })
        .collect::<Vec<_>>()
        .join(" ");
    if s.contains("type STRUCT is unsupported") {
        s.push_str(
            " (this kernel's trampolines take no struct argument by value; 6.1 and later do)",
        );
    }
    s
}

/// A program of the object as its type, if it is there and of that type.
fn typed<'a, T>(ebpf: &'a mut Ebpf, prog: &str) -> Option<&'a mut T>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program>,
{
    ebpf.program_mut(prog).and_then(|p| p.try_into().ok())
}

/// Load the kprobe (or kretprobe) program `prog` and attach it to `function`; on failure the
/// loader's or kernel's reason, with a hint when the kernel has no kprobes at all.
fn attach_kprobe(
    ebpf: &mut Ebpf,
    prog: &'static str,
    kind: &'static str,
    function: &'static str,
) -> Result<(), AttachError> {
    let program: &mut KProbe = typed(ebpf, prog).ok_or(AttachError::Missing(prog))?;
    program.load().map_err(|cause| AttachError::Load {
        kind,
        function,
        cause,
    })?;
    program.attach(function, 0).map_err(|cause| {
        if std::path::Path::new(KPROBE_PMU).exists() {
            AttachError::Attach {
                kind,
                function,
                cause,
            }
        } else {
            AttachError::NoKprobes {
                kind,
                function,
                cause,
            }
        }
    })?;
    Ok(())
}

/// Unload (and so detach) the programs of a backend that failed part way.
fn unload(ebpf: &mut Ebpf, programs: &[Attach]) {
    for a in programs {
        let prog = a.program();
        let _ = match a {
            Attach::Fentry(..) => typed::<FEntry>(ebpf, prog).map(|p| p.unload()),
            Attach::Fexit(..) => typed::<FExit>(ebpf, prog).map(|p| p.unload()),
            Attach::Kprobe(..) | Attach::Kretprobe(..) => {
                typed::<KProbe>(ebpf, prog).map(|p| p.unload())
            }
            Attach::Tracepoint(..) => typed::<TracePoint>(ebpf, prog).map(|p| p.unload()),
        };
    }
}

#[cfg(test)]
mod tests;
