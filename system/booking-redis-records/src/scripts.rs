//! The records' Lua scripts: one per conditional write, each the prelude
//! (`lua/prelude.lua`: the keys, the record's load, the condition, and the
//! commit that writes record, indexes and stream entry) plus its body.
//! Loaded once when the store connects and run by SHA (`EVALSHA`); a server
//! that lost them gets them again on the `NOSCRIPT` answer.

use redis::Script;

/// Prelude + body, as one script's source.
macro_rules! script {
    ($file:literal) => {
        Script::new(concat!(
            include_str!("lua/prelude.lua"),
            "\n",
            include_str!(concat!("lua/", $file))
        ))
    };
}

/// Every script the records run.
pub(crate) struct Scripts {
    pub(crate) put: Script,
    pub(crate) mark_paid: Script,
    pub(crate) mark_emailed: Script,
    pub(crate) extend: Script,
    pub(crate) query_failures: Script,
    pub(crate) delete: Script,
    pub(crate) ttl_delete: Script,
}

impl Scripts {
    pub(crate) fn new() -> Scripts {
        Scripts {
            put: script!("put.lua"),
            mark_paid: script!("mark_paid.lua"),
            mark_emailed: script!("mark_emailed.lua"),
            extend: script!("extend.lua"),
            query_failures: script!("query_failures.lua"),
            delete: script!("delete.lua"),
            ttl_delete: script!("ttl_delete.lua"),
        }
    }

    pub(crate) fn all(&self) -> [&Script; 7] {
        [
            &self.put,
            &self.mark_paid,
            &self.mark_emailed,
            &self.extend,
            &self.query_failures,
            &self.delete,
            &self.ttl_delete,
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
