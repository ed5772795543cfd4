//! The ledger's Lua scripts: one per operation, each the prelude
//! (`lua/prelude.lua`: key names, the hold encoding, the shared checks) plus
//! its body. Loaded once when the ledger connects and run by SHA (`EVALSHA`);
//! a server that lost them (restart, `SCRIPT FLUSH`, failover) gets them again
//! on the `NOSCRIPT` answer.

use redis::Script;

/// Every script the ledger runs.
pub(crate) struct Scripts {
    pub(crate) reset: Script,
    pub(crate) load_candidates: Script,
    pub(crate) set_open: Script,
    pub(crate) admit: Script,
    pub(crate) attach_payment: Script,
    pub(crate) undo_admission: Script,
    pub(crate) release: Script,
    pub(crate) mark_paid: Script,
    pub(crate) extend: Script,
    pub(crate) counters: Script,
    pub(crate) stale_pending: Script,
    pub(crate) stale_held: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            reset: lua_script!("reset.lua"),
            load_candidates: lua_script!("load_candidates.lua"),
            set_open: lua_script!("set_open.lua"),
            admit: lua_script!("admit.lua"),
            attach_payment: lua_script!("attach_payment.lua"),
            undo_admission: lua_script!("undo_admission.lua"),
            release: lua_script!("release.lua"),
            mark_paid: lua_script!("mark_paid.lua"),
            extend: lua_script!("extend.lua"),
            counters: lua_script!("counters.lua"),
            stale_pending: lua_script!("stale_pending.lua"),
            stale_held: lua_script!("stale_held.lua"),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 12] {
        [
            &self.reset,
            &self.load_candidates,
            &self.set_open,
            &self.admit,
            &self.attach_payment,
            &self.undo_admission,
            &self.release,
            &self.mark_paid,
            &self.extend,
            &self.counters,
            &self.stale_pending,
            &self.stale_held,
        ]
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("admit", &self.admit.get_hash())
            .finish_non_exhaustive()
    }
}
