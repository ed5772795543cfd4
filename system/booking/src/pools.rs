//! What a backend's connection pool reports: the figure that names the
//! article's first load-test bug (a Redis pool sized for normal traffic, not
//! the burst) by its cause: callers waiting for a connection.
//!
//! The Redis adapters' pools fill it in (`booking_redis::pool`); the server
//! puts it on `/metrics` (`booking_redis_pool_*`), and the rehearsal judges
//! the fleet's waits (`redis_pool_waits`).

/// One pool's gauges as of now and its counts since it was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolFigures {
    /// The most connections it may open.
    pub max_size: u64,
    /// Connections open now.
    pub open: u64,
    /// Of which handed out now.
    pub in_use: u64,
    /// Callers waiting for a connection now.
    pub waiting: u64,
    /// Connections asked for.
    pub gets: u64,
    /// Of which asked for while every connection was open and in use: the
    /// caller waited for another caller to give one back.
    pub waits: u64,
    /// Time those callers waited, summed, in microseconds.
    pub wait_micros: u64,
    /// Of which gave up when the pool's wait bound ran out: the call failed.
    pub timeouts: u64,
}

impl PoolFigures {
    /// Waits as a percentage of the connections asked for (0 when none was).
    pub fn wait_pct(&self) -> f64 {
        if self.gets == 0 {
            0.0
        } else {
            self.waits as f64 * 100.0 / self.gets as f64
        }
    }
}

/// Several instances' pools of one adapter, summed: sizes, gauges and counts
/// alike.
impl std::ops::AddAssign for PoolFigures {
    fn add_assign(&mut self, other: PoolFigures) {
        self.max_size += other.max_size;
        self.open += other.open;
        self.in_use += other.in_use;
        self.waiting += other.waiting;
        self.gets += other.gets;
        self.waits += other.waits;
        self.wait_micros += other.wait_micros;
        self.timeouts += other.timeouts;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_pct_is_waits_over_gets() {
        assert_eq!(PoolFigures::default().wait_pct(), 0.0);
        let f = PoolFigures {
            gets: 400,
            waits: 100,
            ..PoolFigures::default()
        };
        assert_eq!(f.wait_pct(), 25.0);
    }

    #[test]
    fn instances_add_up_field_by_field() {
        let one = PoolFigures {
            max_size: 1,
            open: 2,
            in_use: 3,
            waiting: 4,
            gets: 5,
            waits: 6,
            wait_micros: 7,
            timeouts: 8,
        };
        let mut sum = one;
        sum += PoolFigures {
            max_size: 10,
            open: 20,
            in_use: 30,
            waiting: 40,
            gets: 50,
            waits: 60,
            wait_micros: 70,
            timeouts: 80,
        };
        assert_eq!(
            sum,
            PoolFigures {
                max_size: 11,
                open: 22,
                in_use: 33,
                waiting: 44,
                gets: 55,
                waits: 66,
                wait_micros: 77,
                timeouts: 88,
            }
        );
    }
}
