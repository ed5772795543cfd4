//! The queue's Lua scripts: one per operation, each the prelude
//! (`lua/prelude.lua`: key order, the message encoding, `settle`) plus its
//! body. Loaded once when the queue connects and run by SHA (`EVALSHA`); a
//! server that lost them (restart, `SCRIPT FLUSH`, failover) gets them again
//! on the `NOSCRIPT` answer.

use redis::Script;

use booking_redis::lua_script;

/// Every script the queue runs.
pub(crate) struct Scripts {
    pub(crate) send: Script,
    pub(crate) receive: Script,
    pub(crate) delete: Script,
    pub(crate) change_visibility: Script,
    pub(crate) stats: Script,
    pub(crate) dead_letters: Script,
    pub(crate) purge: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            send: lua_script!("send.lua"),
            receive: lua_script!("receive.lua"),
            delete: lua_script!("delete.lua"),
            change_visibility: lua_script!("change_visibility.lua"),
            stats: lua_script!("stats.lua"),
            dead_letters: lua_script!("dead_letters.lua"),
            purge: lua_script!("purge.lua"),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 7] {
        [
            &self.send,
            &self.receive,
            &self.delete,
            &self.change_visibility,
            &self.stats,
            &self.dead_letters,
            &self.purge,
        ]
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("receive", &self.receive.get_hash())
            .finish_non_exhaustive()
    }
}
