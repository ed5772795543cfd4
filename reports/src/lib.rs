//! The rehearsal report (SPEC §6): the [`model`] of `report.json`.

pub mod model;

pub use model::{
    Fault, InvariantResult, LevelFigures, LoadFigures, Phase, QueueFigures, Report, SaleFigures,
    Sample, SCHEMA, TransactionFigures,
};
