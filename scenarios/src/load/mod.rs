//! The open-model load engine over goose.
