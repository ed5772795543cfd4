//! The records' Lua scripts: one per conditional write, each the prelude
//! (`lua/prelude.lua`: the keys, the record's load, the condition, and the
//! commit that writes record, indexes and stream entry) plus its body.
//! Loaded once when the store connects and run by SHA (`EVALSHA`); a server
//! that lost them gets them again on the `NOSCRIPT` answer.

use redis::Script;

use booking_redis::lua_script;

/// Every script the records run.
pub(crate) struct Scripts {
    pub(crate) put: Script,
    pub(crate) mark_paid: Script,
    pub(crate) mark_emailed: Script,
    pub(crate) extend: Script,
    pub(crate) query_failures: Script,
    pub(crate) delete: Script,
    pub(crate) ttl_delete: Script,
    pub(crate) sale_delete: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            put: lua_script!("put.lua"),
            mark_paid: lua_script!("mark_paid.lua"),
            mark_emailed: lua_script!("mark_emailed.lua"),
            extend: lua_script!("extend.lua"),
            query_failures: lua_script!("query_failures.lua"),
            delete: lua_script!("delete.lua"),
            ttl_delete: lua_script!("ttl_delete.lua"),
            sale_delete: lua_script!("sale_delete.lua"),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 8] {
        [
            &self.put,
            &self.mark_paid,
            &self.mark_emailed,
            &self.extend,
            &self.query_failures,
            &self.delete,
            &self.ttl_delete,
            &self.sale_delete,
        ]
    }
}

impl std::fmt::Debug for Scripts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scripts")
            .field("put", &self.put.get_hash())
            .finish_non_exhaustive()
    }
}
