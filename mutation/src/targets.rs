//! What is mutated: the core crates (`just mutants`) and, within them, the
//! files that decide money and seats (the CI step). One place: the recipe,
//! the CI step and the README read these lists.

/// The files of one package that a scope mutates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The cargo package.
    pub package: &'static str,
    /// Its files, relative to the workspace root (globs as cargo-mutants
    /// takes them).
    pub files: &'static [&'static str],
}

/// Which mutants a run covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scope {
    /// The core crates: the domain, the service, the ledger's Rust side,
    /// the API's request path, the bKash token manager.
    Core,
    /// The files that decide money and seats: confirm, reconciler, worker,
    /// expiry, the Redis ledger's Rust side (what CI runs).
    Money,
}

/// The money path: what `.ci/run` keeps at the minimum score.
const MONEY: &[Target] = &[
    Target {
        package: "booking-service",
        files: &[
            "system/booking-service/src/confirm.rs",
            "system/booking-service/src/reconciler.rs",
            "system/booking-service/src/worker.rs",
            "system/booking-service/src/expiry.rs",
        ],
    },
    Target {
        package: "booking-redis",
        files: &["system/booking-redis/src/ledger.rs"],
    },
];

/// The core crates, whole or the part the issue names.
const CORE: &[Target] = &[
    Target {
        package: "booking",
        files: &["system/booking/src/*.rs"],
    },
    Target {
        package: "booking-service",
        files: &["system/booking-service/src/*.rs"],
    },
    Target {
        package: "booking-redis",
        files: &["system/booking-redis/src/*.rs"],
    },
    Target {
        package: "booking-api",
        files: &[
            "system/booking-api/src/bookings.rs",
            "system/booking-api/src/confirm_paths.rs",
            "system/booking-api/src/answers.rs",
            "system/booking-api/src/deadline.rs",
            "system/booking-api/src/candidate_auth.rs",
        ],
    },
    Target {
        package: "booking-bkash",
        files: &["system/booking-bkash/src/tokens.rs"],
    },
];

impl Scope {
    /// The targets of this scope.
    pub fn targets(self) -> &'static [Target] {
        match self {
            Scope::Core => CORE,
            Scope::Money => MONEY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every money-path file is in the core scope too (the recipe's table
    /// covers what CI keeps), and every listed file exists.
    #[test]
    fn the_money_path_is_inside_the_core_and_every_file_exists() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for t in MONEY {
            let core = CORE
                .iter()
                .find(|c| c.package == t.package)
                .expect("a core package");
            for f in t.files {
                assert!(root.join(f).is_file(), "{f} is missing");
                let dir = f.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                assert!(
                    core.files.contains(f) || core.files.contains(&format!("{dir}/*.rs").as_str()),
                    "{f} is on the money path but not in the core scope"
                );
            }
        }
        for t in CORE {
            for f in t.files.iter().filter(|f| !f.contains('*')) {
                assert!(root.join(f).is_file(), "{f} is missing");
            }
        }
    }
}
