//! What a key is held to: the limits of the config ([`Spec`]), each kind of limit ([`Limit`]) and
//! how its use comes back, and a key's [`Account`]: its counters (its own limits, its tenant's,
//! the registered servers'), each with its storage key.
//!
//! Invariant: every counter of a tenant carries the tenant's `{tenant}` hash tag (one Redis
//! Cluster slot per check); a key's counters are named by a stable, non-secret id.

use super::bucket::Rule;

/// The limits one key or one tenant is held to (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spec {
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    pub tokens_per_day: Option<u64>,
    pub concurrent_runs: Option<u64>,
    pub mcp_calls_per_minute: Option<u64>,
}

impl Spec {
    pub fn is_empty(&self) -> bool {
        *self == Spec::default()
    }

    /// `self`, with what it leaves unset taken from `other`.
    pub fn or(self, other: Spec) -> Spec {
        Spec {
            requests_per_minute: self.requests_per_minute.or(other.requests_per_minute),
            tokens_per_minute: self.tokens_per_minute.or(other.tokens_per_minute),
            tokens_per_day: self.tokens_per_day.or(other.tokens_per_day),
            concurrent_runs: self.concurrent_runs.or(other.concurrent_runs),
            mcp_calls_per_minute: self.mcp_calls_per_minute.or(other.mcp_calls_per_minute),
        }
    }

    fn each(&self) -> [(Limit, Option<u64>); 5] {
        [
            (Limit::Requests, self.requests_per_minute),
            (Limit::Tokens, self.tokens_per_minute),
            (Limit::TokensPerDay, self.tokens_per_day),
            (Limit::Runs, self.concurrent_runs),
            (Limit::McpCalls, self.mcp_calls_per_minute),
        ]
    }
}

/// One kind of limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    Requests,
    Tokens,
    TokensPerDay,
    Runs,
    McpCalls,
    /// Calls per minute to one registered MCP server.
    ServerCalls,
}

const MINUTE: Rule = Rule::Rate { period_ms: 60_000 };

impl Limit {
    /// Its name in the config file, `/metrics` and `GET /v1/limits`.
    pub fn name(self) -> &'static str {
        match self {
            Limit::Requests => "requests_per_minute",
            Limit::Tokens => "tokens_per_minute",
            Limit::TokensPerDay => "tokens_per_day",
            Limit::Runs => "concurrent_runs",
            Limit::McpCalls => "mcp_calls_per_minute",
            Limit::ServerCalls => "calls_per_minute",
        }
    }

    pub(super) fn rule(self) -> Rule {
        match self {
            Limit::TokensPerDay => Rule::Day,
            Limit::Runs => Rule::Slots,
            _ => MINUTE,
        }
    }

    pub(super) fn words(self) -> &'static str {
        match self {
            Limit::Requests => "requests per minute (RPM)",
            Limit::Tokens => "tokens per minute (TPM)",
            Limit::TokensPerDay => "tokens per day",
            Limit::Runs => "concurrent runs",
            Limit::McpCalls => "MCP calls per minute",
            Limit::ServerCalls => "calls per minute",
        }
    }
}

/// Whose counter it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Owner {
    Key,
    Tenant,
    /// The key's calls to this registered MCP server.
    Server(String),
}

/// One counter of an account: a limit, whose it is, its maximum and its storage key.
#[derive(Debug, Clone)]
pub(super) struct Counter {
    pub(super) limit: Limit,
    pub(super) owner: Owner,
    pub(super) max: u64,
    pub(super) key: String,
}

/// What one relay key is held to: its limits, its tenant's, and the registered servers'.
#[derive(Debug)]
pub struct Account {
    tenant: String,
    pub(super) counters: Vec<Counter>,
}

impl Account {
    /// The account of the key `key_id` (a stable, non-secret name: e.g. a prefix of its hash) of
    /// `tenant`, or `None` when nothing limits it.
    pub fn new(
        key_id: &str,
        tenant: &str,
        key: Spec,
        of_tenant: Spec,
        servers: &[(String, u64)],
    ) -> Option<Account> {
        // Every counter of a tenant shares one hash tag: one Redis Cluster slot per check.
        let base = format!("relay:limit:{{{tenant}}}");
        let mut counters = Vec::new();
        for (owner, spec) in [(Owner::Key, key), (Owner::Tenant, of_tenant)] {
            for (limit, max) in spec.each() {
                let Some(max) = max else { continue };
                let key = match owner {
                    Owner::Key => format!("{base}:key:{key_id}:{}", limit.name()),
                    _ => format!("{base}:tenant:{}", limit.name()),
                };
                counters.push(Counter {
                    limit,
                    owner: owner.clone(),
                    max,
                    key,
                });
            }
        }
        for (server, max) in servers {
            counters.push(Counter {
                limit: Limit::ServerCalls,
                owner: Owner::Server(server.clone()),
                max: *max,
                key: format!("{base}:key:{key_id}:server:{server}"),
            });
        }
        (!counters.is_empty()).then(|| Account {
            tenant: tenant.to_string(),
            counters,
        })
    }

    pub fn tenant(&self) -> &str {
        &self.tenant
    }

    pub(super) fn of(&self, limits: &[Limit]) -> impl Iterator<Item = &Counter> {
        self.counters
            .iter()
            .filter(move |c| limits.contains(&c.limit))
    }

    /// How a message names a counter's owner.
    pub(super) fn whose(&self, c: &Counter) -> String {
        match &c.owner {
            Owner::Key => format!("this key (tenant '{}')", self.tenant),
            Owner::Tenant => format!("tenant '{}'", self.tenant),
            Owner::Server(s) => format!("this key's calls to MCP server '{s}'"),
        }
    }
}
