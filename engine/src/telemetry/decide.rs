//! Telemetry requests and the pure decider: a request and the projection in, one event for the
//! session's stream (with the stream version to expect) or a typed rejection out. A rejection
//! records nothing.
//!
//! Request shapes (one JSON object, `kind` first):
//!
//! * `{"kind":"efficiency","session":S,"arm":A?,"stratum":T?,"event":{…efficiency-event/v1…}}`
//! * `{"kind":"usage","session":S,"provider":P,"model":M?,"profile":F?,"mode":D?,"stratum":T?,
//!   "arm":A?,"accounting_source":C,"currency":"USD"?,"cumulative":{input_tokens,
//!   cache_creation_tokens, cache_read_tokens, output_tokens, cost_micros, wall_ms}}`
//! * `{"kind":"session","session":S,"provider":P,"arm":A?,"currency":…?,"totals":{…the same
//!   counters…},"total_cost_usd":N?}` (`total_cost_usd`, as Claude reports it, becomes
//!   `totals.cost_micros` in USD, rounded half up to the micro).
//!
//! Counters left out or `null` are unknown, never zero. The whole request passes the telemetry
//! privacy scan before anything else reads it, so no rejection quotes private input.

use serde::Deserialize;
use serde_json::Value;
use strata_journal::EventData;

use super::TelemetryError;
use super::events::{
    self, AccountingSource, Arm, COUNTERS, Counters, EfficiencyRecorded, PROFILES, Provider, SessionReported,
    UsageReported,
};
use super::state::{Class, Session, Telemetry};
use crate::ce::router::Mode;
use crate::ports::{Clock, Ids};
use crate::promotion::gates::STRATA;

/// Largest request, bytes (checked by the adapter while reading).
pub const REQUEST_BYTES_MAX: usize = 1 << 20;

/// One telemetry request.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Request {
    /// An efficiency event.
    Efficiency {
        /// Session pseudonym.
        session: String,
        /// Arm.
        #[serde(default)]
        arm: Option<Arm>,
        /// Stratum.
        #[serde(default)]
        stratum: Option<String>,
        /// The raw `knowzcode.efficiency-event/v1`.
        event: Value,
    },
    /// Cumulative usage after an invocation.
    Usage {
        /// Session pseudonym.
        session: String,
        /// Provider.
        provider: Provider,
        /// Model.
        #[serde(default)]
        model: Option<String>,
        /// Profile.
        #[serde(default)]
        profile: Option<String>,
        /// Mode.
        #[serde(default)]
        mode: Option<String>,
        /// Stratum.
        #[serde(default)]
        stratum: Option<String>,
        /// Arm.
        #[serde(default)]
        arm: Option<Arm>,
        /// Who vouches for the billing counters.
        accounting_source: AccountingSource,
        /// Currency of `cost_micros`.
        #[serde(default)]
        currency: Option<String>,
        /// The provider's running totals for the session.
        cumulative: Counters,
    },
    /// The provider's own totals for the session.
    Session {
        /// Session pseudonym.
        session: String,
        /// Provider.
        provider: Provider,
        /// Arm.
        #[serde(default)]
        arm: Option<Arm>,
        /// Currency of `totals.cost_micros`.
        #[serde(default)]
        currency: Option<String>,
        /// The totals.
        #[serde(default)]
        totals: Counters,
        /// Claude's `total_cost_usd`, converted to USD micros.
        #[serde(default)]
        total_cost_usd: Option<f64>,
    },
}

impl Request {
    /// Reads a request: the privacy scan over the whole document first, then the shape.
    pub fn parse(v: &Value) -> Result<Request, TelemetryError> {
        if !v.is_object() {
            return Err(TelemetryError::Shape("must be a JSON object with a `kind`".to_owned()));
        }
        crate::ce::wire::telemetry::private(v)?;
        serde_json::from_value(v.clone()).map_err(|e| TelemetryError::Shape(e.to_string()))
    }
}

/// What to append: one event to `stream`, expecting it at `expected_version`.
#[derive(Debug)]
pub struct Decision {
    /// The session's stream.
    pub stream: String,
    /// Its version the decision was made against (0: new).
    pub expected_version: u64,
    /// The event.
    pub event: EventData,
}

/// Decides `req` against `state`.
pub fn decide(
    state: &Telemetry,
    req: &Request,
    ids: &mut dyn Ids,
    clock: &dyn Clock,
) -> Result<Decision, TelemetryError> {
    let (session, event) = match req {
        Request::Efficiency { session, arm, stratum, event } => {
            let s = known(state, session)?;
            check_stratum(stratum.as_deref())?;
            fixed(s, session, "arm", s.and_then(|s| s.arm).map(Arm::as_str), arm.map(Arm::as_str))?;
            let event = crate::ce::wire::telemetry::normalise(event)?;
            let x = EfficiencyRecorded { session: session.clone(), arm: *arm, stratum: stratum.clone(), event };
            (session, stamp(ids, clock, events::EFFICIENCY_RECORDED, &x)?)
        }
        Request::Usage {
            session,
            provider,
            model,
            profile,
            mode,
            stratum,
            arm,
            accounting_source,
            currency,
            cumulative,
        } => {
            let s = known(state, session)?;
            bounded("cumulative", cumulative)?;
            check_names(model.as_deref(), profile.as_deref(), mode.as_deref(), stratum.as_deref())?;
            common(s, session, *provider, *arm, currency.as_deref(), cumulative.cost_micros)?;
            if cumulative.any_billing() && *accounting_source == AccountingSource::Unknown {
                return Err(TelemetryError::AccountingSourceRequired);
            }
            if *provider == Provider::Simulated && accounting_source.billed() {
                return Err(TelemetryError::BadValue {
                    field: "accounting_source",
                    rule: "a simulated provider's figures are synthetic: give estimated or unknown".to_owned(),
                });
            }
            // `unknown` fixes nothing; billed and estimated never mix within a session.
            let class = Class::of(*accounting_source);
            let held = s.and_then(|s| s.class).filter(|c| *c != Class::Unknown);
            if class != Class::Unknown {
                fixed(s, session, "accounting_source", held.map(Class::as_str), Some(class.as_str()))?;
            }
            let delta = derive_delta(s, session, cumulative)?;
            let x = UsageReported {
                session: session.clone(),
                provider: *provider,
                model: model.clone(),
                profile: profile.clone(),
                mode: mode.clone(),
                stratum: stratum.clone(),
                arm: *arm,
                accounting_source: *accounting_source,
                currency: currency.clone(),
                cumulative: *cumulative,
                delta,
            };
            (session, stamp(ids, clock, events::USAGE_REPORTED, &x)?)
        }
        Request::Session { session, provider, arm, currency, totals, total_cost_usd } => {
            let s = known(state, session)?;
            let mut totals = *totals;
            let mut currency = currency.clone();
            if let Some(usd) = total_cost_usd {
                if totals.cost_micros.is_some() {
                    return Err(TelemetryError::BadValue {
                        field: "total_cost_usd",
                        rule: "given with totals.cost_micros; give one of them".to_owned(),
                    });
                }
                if currency.as_deref().is_some_and(|c| c != "USD") {
                    return Err(TelemetryError::BadValue {
                        field: "currency",
                        rule: "total_cost_usd is in USD; give currency USD or leave it out".to_owned(),
                    });
                }
                totals.cost_micros = Some(usd_to_micros(*usd)?);
                currency = Some("USD".to_owned());
            }
            bounded("totals", &totals)?;
            common(s, session, *provider, *arm, currency.as_deref(), totals.cost_micros)?;
            let x = SessionReported { session: session.clone(), provider: *provider, arm: *arm, currency, totals };
            (session, stamp(ids, clock, events::SESSION_REPORTED, &x)?)
        }
    };
    let expected_version = state.sessions().get(session).map_or(0, |s| s.version);
    Ok(Decision { stream: super::stream_of(session), expected_version, event })
}

/// The per-invocation delta: the first report's delta is its cumulative value; a counter unknown
/// now or in the previous report has an unknown delta; a counter below its highest known value
/// is refused.
fn derive_delta(s: Option<&Session>, session: &str, cur: &Counters) -> Result<Counters, TelemetryError> {
    let Some(s) = s.filter(|s| s.last.is_some()) else {
        return Ok(*cur);
    };
    let prev = s.last.unwrap_or_default().named();
    let highest = s.highest.named();
    let now = cur.named();
    for i in 0..COUNTERS.len() {
        if let (Some(p), Some(c)) = (highest[i].1, now[i].1)
            && c < p
        {
            return Err(TelemetryError::Regression {
                counter: COUNTERS[i],
                session: session.to_owned(),
                previous: p,
                given: c,
            });
        }
    }
    Ok(Counters::from_values(std::array::from_fn(|i| match (prev[i].1, now[i].1) {
        (Some(p), Some(c)) => c.checked_sub(p),
        _ => None,
    })))
}

/// `$` dollars as a decimal, to micros, rounded half up; from the number's shortest decimal
/// form, so `0.1` is exactly 100,000.
pub fn usd_to_micros(usd: f64) -> Result<u64, TelemetryError> {
    let bad =
        || TelemetryError::BadValue { field: "total_cost_usd", rule: "a finite number ≥ 0 below 10^12".to_owned() };
    if !(0.0..1e12).contains(&usd) {
        return Err(bad());
    }
    let text = format!("{usd}");
    let (whole, frac) = text.split_once('.').unwrap_or((text.as_str(), ""));
    let whole: u64 = whole.parse().map_err(|_| bad())?;
    let digits: Vec<u64> = frac.bytes().map(|b| u64::from(b - b'0')).collect();
    let micros = digits.iter().take(6).enumerate().fold(0u64, |a, (i, d)| a + d * 10u64.pow(5 - i as u32));
    let up = u64::from(digits.get(6).is_some_and(|d| *d >= 5));
    Ok(whole * 1_000_000 + micros + up)
}

/// The event stamped by the ports (the ledger's stamping, its error made ours).
fn stamp(
    ids: &mut dyn Ids,
    clock: &dyn Clock,
    t: &str,
    x: &impl serde::Serialize,
) -> Result<EventData, TelemetryError> {
    crate::ce::ledger::event(ids, clock, t, x).map_err(|e| TelemetryError::Internal(e.detail))
}

fn known<'a>(state: &'a Telemetry, session: &str) -> Result<Option<&'a Session>, TelemetryError> {
    if !events::session_valid(session) {
        return Err(TelemetryError::BadValue {
            field: "session",
            rule: "a pseudonym of 1 to 64 characters `a-z 0-9 -`, starting with a letter or digit \
                   (never a provider's session id)"
                .to_owned(),
        });
    }
    Ok(state.sessions().get(session))
}

/// A property fixed once a session holds it.
fn fixed(
    s: Option<&Session>,
    session: &str,
    field: &'static str,
    recorded: Option<&str>,
    given: Option<&str>,
) -> Result<(), TelemetryError> {
    match (s, recorded, given) {
        (Some(_), Some(r), Some(g)) if r != g => Err(TelemetryError::SessionChanged {
            field,
            session: session.to_owned(),
            recorded: r.to_owned(),
            given: g.to_owned(),
        }),
        _ => Ok(()),
    }
}

/// Provider, arm and currency: fixed per session; a known cost needs a currency.
fn common(
    s: Option<&Session>,
    session: &str,
    provider: Provider,
    arm: Option<Arm>,
    currency: Option<&str>,
    cost: Option<u64>,
) -> Result<(), TelemetryError> {
    if let Some(c) = currency
        && !events::currency_valid(c)
    {
        return Err(TelemetryError::BadValue {
            field: "currency",
            rule: "three capital letters (ISO 4217)".to_owned(),
        });
    }
    if cost.is_some() && currency.is_none() {
        return Err(TelemetryError::BadValue {
            field: "currency",
            rule: "required with a cost: the ISO 4217 code of cost_micros (e.g. USD)".to_owned(),
        });
    }
    fixed(s, session, "provider", s.and_then(|s| s.provider).map(Provider::as_str), Some(provider.as_str()))?;
    fixed(s, session, "arm", s.and_then(|s| s.arm).map(Arm::as_str), arm.map(Arm::as_str))?;
    fixed(s, session, "currency", s.and_then(|s| s.currency.as_deref()), currency)
}

fn check_stratum(stratum: Option<&str>) -> Result<(), TelemetryError> {
    match stratum {
        Some(t) if !STRATA.contains(&t) => {
            Err(TelemetryError::BadValue { field: "stratum", rule: format!("one of {}", STRATA.join(", ")) })
        }
        _ => Ok(()),
    }
}

fn check_names(
    model: Option<&str>,
    profile: Option<&str>,
    mode: Option<&str>,
    stratum: Option<&str>,
) -> Result<(), TelemetryError> {
    if model.is_some_and(|m| !events::model_valid(m)) {
        return Err(TelemetryError::BadValue {
            field: "model",
            rule: format!("one of {}, or `anon-model-` and 16 to 64 hex digits", events::MODELS.join(", ")),
        });
    }
    if profile.is_some_and(|p| !PROFILES.contains(&p)) {
        return Err(TelemetryError::BadValue { field: "profile", rule: format!("one of {}", PROFILES.join(", ")) });
    }
    if mode.is_some_and(|m| Mode::parse(m).is_none()) {
        let all: Vec<&str> = Mode::ALL.iter().map(|m| m.as_str()).collect();
        return Err(TelemetryError::BadValue { field: "mode", rule: format!("one of {}", all.join(", ")) });
    }
    check_stratum(stratum)
}

/// Refuses a counter above [`events::COUNTER_MAX`].
fn bounded(field: &'static str, c: &Counters) -> Result<(), TelemetryError> {
    match c.too_large() {
        None => Ok(()),
        Some(name) => Err(TelemetryError::BadValue {
            field,
            rule: format!("{name} is above {}; counters are at most 10^15", events::COUNTER_MAX),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollars_become_micros_exactly() {
        assert_eq!(usd_to_micros(0.1).unwrap(), 100_000);
        assert_eq!(usd_to_micros(1.0).unwrap(), 1_000_000);
        assert_eq!(usd_to_micros(0.123_456_5).unwrap(), 123_457);
        assert_eq!(usd_to_micros(0.000_000_4).unwrap(), 0);
        assert_eq!(usd_to_micros(12.345_678).unwrap(), 12_345_678);
        assert!(usd_to_micros(-1.0).is_err());
        assert!(usd_to_micros(f64::NAN).is_err());
    }
}
