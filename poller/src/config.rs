//! The poller's one config struct: every field documented with its default, defaults as
//! named constants, and a `validate()` that names the field at fault.

pub use punctual_core::ConfigError;

/// Default time between ticks: 1 s, the scheduler's promised precision.
pub const DEFAULT_TICK_MS: u64 = 1_000;
/// Default lease duration: 10 s. A dead poller's shards are taken over within about this long.
pub const DEFAULT_LEASE_TTL_MS: i64 = 10_000;
/// Default clock-skew allowance between any two machines: 5 s.
pub const DEFAULT_SKEW_MS: i64 = 5_000;
/// Default due-index page size.
pub const DEFAULT_PAGE: usize = 1_000;
/// Default messages per `queue_send` call: 10, SQS's `SendMessageBatch` maximum.
pub const DEFAULT_SEND_BATCH: usize = 10;
/// Default most non-empty index pages one shard dispatches per tick.
pub const DEFAULT_MAX_PAGES_PER_TICK: usize = 100;

/// A refusal of this component's `field`.
fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::new("poller", field, message)
}

/// How one poller behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerConfig {
    /// This poller's name in the lease table; must be unique among live pollers.
    /// Default: `{hostname}-{pid}-{random}` (see [`default_owner`]).
    pub owner: String,
    /// Time between ticks, ms. Default [`DEFAULT_TICK_MS`].
    pub tick_ms: u64,
    /// Lease duration, ms; a lease is renewed every `lease_ttl_ms / 3`.
    /// Default [`DEFAULT_LEASE_TTL_MS`].
    pub lease_ttl_ms: i64,
    /// The largest clock difference tolerated between two machines, ms. Buckets younger than
    /// `now - skew_ms` are queried again every tick (the watermark never passes
    /// `minute_of(now - skew_ms)`), and a lease is used only until `expires_ms - skew_ms`.
    /// Default [`DEFAULT_SKEW_MS`].
    pub skew_ms: i64,
    /// Due-index page size (`due_query` limit). Default [`DEFAULT_PAGE`].
    pub page: usize,
    /// Messages per `queue_send` call. Default [`DEFAULT_SEND_BATCH`] (SQS's maximum; the
    /// embedded queue accepts more).
    pub send_batch: usize,
    /// Most non-empty pages one shard dispatches per tick, so one huge minute cannot hold the
    /// loop away from lease renewal and the other shards. Default [`DEFAULT_MAX_PAGES_PER_TICK`].
    pub max_pages_per_tick: usize,
    /// Most shards this poller holds. Default `None`: a fair share, `ceil(shard_count / P)`
    /// with `P` the live pollers seen in the lease table (this one included).
    pub max_shards: Option<usize>,
}

impl Default for PollerConfig {
    fn default() -> Self {
        Self {
            owner: default_owner(),
            tick_ms: DEFAULT_TICK_MS,
            lease_ttl_ms: DEFAULT_LEASE_TTL_MS,
            skew_ms: DEFAULT_SKEW_MS,
            page: DEFAULT_PAGE,
            send_batch: DEFAULT_SEND_BATCH,
            max_pages_per_tick: DEFAULT_MAX_PAGES_PER_TICK,
            max_shards: None,
        }
    }
}

impl PollerConfig {
    /// How often a held lease is renewed: a third of its duration.
    pub fn renew_every_ms(&self) -> i64 {
        self.lease_ttl_ms / 3
    }

    /// Checks every field; the error names the first one at fault.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.owner.trim().is_empty() {
            return Err(invalid("owner", "must not be empty"));
        }
        if self.tick_ms == 0 {
            return Err(invalid("tick_ms", "must be positive"));
        }
        if self.lease_ttl_ms <= 0 {
            return Err(invalid("lease_ttl_ms", "must be positive"));
        }
        if self.skew_ms < 0 {
            return Err(invalid("skew_ms", "must not be negative"));
        }
        if self.page == 0 {
            return Err(invalid("page", "must be positive"));
        }
        if self.send_batch == 0 {
            return Err(invalid("send_batch", "must be positive"));
        }
        if self.max_pages_per_tick == 0 {
            return Err(invalid("max_pages_per_tick", "must be positive"));
        }
        if self.max_shards == Some(0) {
            return Err(invalid(
                "max_shards",
                "must be positive (leave it unset for a fair share)",
            ));
        }
        // A lease renewed at `r` (expires `r + ttl`) is usable until `r + ttl - skew`; the next
        // renewal comes at the first tick after `r + ttl/3`, at the latest `r + ttl/3 + tick`.
        // Unless that is earlier, the poller would drop its own shards between renewals.
        let tick = i64::try_from(self.tick_ms).unwrap_or(i64::MAX);
        let needed = self
            .skew_ms
            .saturating_add(self.renew_every_ms())
            .saturating_add(tick);
        if self.lease_ttl_ms <= needed {
            return Err(invalid(
                "lease_ttl_ms",
                format!(
                    "must exceed skew_ms + lease_ttl_ms/3 + tick_ms = {needed} ms, or leases lapse \
                     between renewals (got {})",
                    self.lease_ttl_ms
                ),
            ));
        }
        Ok(())
    }
}

/// A default owner name, `{hostname}-{pid}-{random}`: unique per process, and readable in the
/// lease table so an operator sees which machine holds which shard.
pub fn default_owner() -> String {
    let host = ["/proc/sys/kernel/hostname", "/etc/hostname"]
        .iter()
        .find_map(|p| {
            let h = std::fs::read_to_string(p).ok()?;
            let h = h.trim();
            (!h.is_empty()).then(|| h.to_owned())
        })
        .unwrap_or_else(|| "poller".to_owned());
    format!(
        "{host}-{}-{:06x}",
        std::process::id(),
        fastrand::u32(..0x100_0000)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_owners_differ() {
        let a = PollerConfig::default();
        a.validate().unwrap();
        assert_ne!(a.owner, PollerConfig::default().owner);
        assert_eq!(a.renew_every_ms(), 3_333);
    }

    #[test]
    fn validate_names_the_field() {
        let cases: Vec<(&str, PollerConfig)> = vec![
            (
                "owner",
                PollerConfig {
                    owner: " ".into(),
                    ..Default::default()
                },
            ),
            (
                "tick_ms",
                PollerConfig {
                    tick_ms: 0,
                    ..Default::default()
                },
            ),
            (
                "lease_ttl_ms",
                PollerConfig {
                    lease_ttl_ms: 0,
                    ..Default::default()
                },
            ),
            (
                "skew_ms",
                PollerConfig {
                    skew_ms: -1,
                    ..Default::default()
                },
            ),
            (
                "page",
                PollerConfig {
                    page: 0,
                    ..Default::default()
                },
            ),
            (
                "send_batch",
                PollerConfig {
                    send_batch: 0,
                    ..Default::default()
                },
            ),
            (
                "max_pages_per_tick",
                PollerConfig {
                    max_pages_per_tick: 0,
                    ..Default::default()
                },
            ),
            (
                "max_shards",
                PollerConfig {
                    max_shards: Some(0),
                    ..Default::default()
                },
            ),
            (
                // 5000 + 2000 + 1000 >= 6000: the lease would lapse between renewals.
                "lease_ttl_ms",
                PollerConfig {
                    lease_ttl_ms: 6_000,
                    ..Default::default()
                },
            ),
        ];
        for (field, cfg) in cases {
            let err = cfg.validate().unwrap_err();
            assert_eq!(err.field, field, "{err}");
            assert!(err.to_string().contains(field));
        }
    }
}
