//! Mutation testing of the money path (issue 19): the scopes
//! ([`targets`]), the cargo-mutants runner ([`run`]) and its outcomes
//! ([`outcomes`]), the Lua pass ([`lua`], [`lua_run`]), and the per-file
//! score table ([`table`]). The binary (`src/main.rs`) is `just mutants`
//! and the CI step.

pub mod lua;
pub mod lua_run;
pub mod outcomes;
pub mod run;
pub mod table;
pub mod targets;
