//! The module's commands, one per algorithm of ratelab's list
//! ([`ratelab::each_algorithm!`], the rows of `AlgorithmKind`), each with
//! its read-only twin; and their registration when the module loads, on
//! the module API itself (`RM_CreateCommand`) rather than through the
//! binding's wrapper (see [`invoke`](crate::invoke)).

#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_int};

use ratelab::{FixedWindow, Gcra, LeakyMeter, LeakyQueue, SlidingCounter, SlidingLog, TokenBucket};
use ratelab_core::toolkit::{RemoteForm, StringForm};
use redis_module::{Context, RedisString, Status, raw};

use crate::invoke::{sliding_log_command, sliding_log_peek, string_command, string_peek};
use crate::key;

/// One algorithm's command: the algorithm's name (the command is
/// `ratelab.<name>`), the function Redis calls, its flags; and its
/// read-only twin for peeks (`ratelab.<name>_ro`), with its flags.
pub(crate) struct Command {
    pub(crate) algorithm: &'static str,
    function: raw::RedisModuleCmdFunc,
    flags: &'static CStr,
    peek: raw::RedisModuleCmdFunc,
    peek_flags: &'static CStr,
}

impl Command {
    /// The command of an algorithm whose state is one string: every
    /// operation is the algorithm crate's own
    /// ([`string::command`](crate::string::command)). O(1).
    const fn string<A: StringForm>() -> Command {
        Command {
            algorithm: A::NAME,
            function: Some(string_command::<A>),
            flags: FAST,
            peek: Some(string_peek::<A>),
            peek_flags: c"readonly fast",
        }
    }

    /// The sliding log's command, on its sorted set
    /// ([`sliding_log::command`](crate::sliding_log::command)): O(log n +
    /// cost), so not "fast".
    const fn sliding_log() -> Command {
        Command {
            algorithm: SlidingLog::NAME,
            function: Some(sliding_log_command),
            flags: c"write",
            peek: Some(sliding_log_peek),
            peek_flags: c"readonly",
        }
    }
}

/// The flags of an O(1) command.
const FAST: &CStr = c"write fast";

/// How the module runs an algorithm: its [`Command`]. Every algorithm of
/// ratelab's list has one ([`COMMANDS`] is built from the list), so that
/// an algorithm added to the list and not here is a compile error that
/// names its type.
#[diagnostic::on_unimplemented(
    message = "the ratelab module runs no command for `{Self}`",
    label = "an algorithm of `ratelab::each_algorithm!` with no command in the module",
    note = "implement `ModuleCommand` for it in crates/redis-module/src/registry.rs: \
            `Command::string::<Self>()` for a state kept in one string (`StringForm`); \
            a state of another shape needs a command of its own, as the sliding log's"
)]
pub(crate) trait ModuleCommand {
    /// The algorithm's command.
    const COMMAND: Command;
}

// One impl per algorithm: a blanket impl for every `StringForm` beside the
// sliding log's would conflict (both types are foreign, so either could
// implement the other's trait one day).
impl ModuleCommand for FixedWindow {
    const COMMAND: Command = Command::string::<Self>();
}
impl ModuleCommand for SlidingLog {
    const COMMAND: Command = Command::sliding_log();
}
impl ModuleCommand for SlidingCounter {
    const COMMAND: Command = Command::string::<Self>();
}
impl ModuleCommand for LeakyMeter {
    const COMMAND: Command = Command::string::<Self>();
}
impl ModuleCommand for LeakyQueue {
    const COMMAND: Command = Command::string::<Self>();
}
impl ModuleCommand for TokenBucket {
    const COMMAND: Command = Command::string::<Self>();
}
impl ModuleCommand for Gcra {
    const COMMAND: Command = Command::string::<Self>();
}

/// [`COMMANDS`], from the algorithms of ratelab's list.
macro_rules! commands {
    ($($algorithm:ty,)*) => {
        /// Every algorithm's command, in the order of ratelab's list.
        /// "write": a replica refuses it; a cluster routes it by its one
        /// key, the first argument. "fast": O(1), which the log is not
        /// (O(log n + cost)). No "deny-oom": as for a script, only a write
        /// is refused when memory is full. The read-only twin takes the
        /// same arguments and answers peeks only: "readonly", so that a
        /// replica answers it (and a client reading from replicas may send
        /// it there), as it answers a script that writes nothing.
        pub(crate) const COMMANDS: &[Command] = &[$(<$algorithm as ModuleCommand>::COMMAND),*];
    };
}

ratelab::each_algorithm!(commands);

/// Registers the algorithms' commands (the module's `init`).
pub(crate) fn register(ctx: &Context, _args: &[RedisString]) -> Status {
    let Some(create) = (unsafe { raw::RedisModule_CreateCommand }) else {
        return Status::Err;
    };
    if !key::prepare(ctx) {
        return Status::Err;
    }
    for command in COMMANDS {
        let twins = [
            ("", command.function, command.flags),
            ("_ro", command.peek, command.peek_flags),
        ];
        for (suffix, function, flags) in twins {
            let Ok(name) = CString::new(format!("ratelab.{}{suffix}", command.algorithm)) else {
                return Status::Err;
            };
            // SAFETY: the context of OnLoad; NUL-terminated names (Redis
            // copies the name) and static flags; a function of the right
            // signature.
            let status = unsafe {
                create(
                    ctx.get_raw(),
                    name.as_ptr(),
                    function,
                    flags.as_ptr(),
                    1,
                    1,
                    1,
                )
            };
            if status != Status::Ok as c_int {
                ctx.log_warning(&format!("ratelab: cannot register {name:?}"));
                return Status::Err;
            }
        }
    }
    Status::Ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab::AlgorithmKind;

    #[test]
    fn every_algorithm_of_the_list_has_its_own_command() {
        let names: Vec<&str> = COMMANDS.iter().map(|command| command.algorithm).collect();
        let kinds: Vec<&str> = AlgorithmKind::ALL.iter().map(|kind| kind.name()).collect();
        assert_eq!(names, kinds);
    }
}
