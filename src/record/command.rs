//! A validated outcome ([`RecordCommand`]) and its parsing from text, one
//! function for every way in (a RecordOutcome request, an import row), so
//! both obey the same rules.

use crate::domain::InvalidInput;
use crate::domain::attempts::AttemptId;
use crate::domain::combo::Combo;
use crate::domain::counts::Outcome;
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::tenant::Tenant;

/// A validated RecordOutcome.
#[derive(Debug, Clone)]
pub struct RecordCommand {
    /// The call's tenant (the default one unless [`Self::in_tenant`] says
    /// otherwise): its keys live in that tenant's namespace.
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub customer: CustomerId,
    pub combo: Combo,
    /// The connector, also inside `combo`: the circuit breaker counts by
    /// (merchant, connector). Kept from parsing, so it costs no copy.
    pub connector: Connector,
    pub outcome: Outcome,
    /// The orchestrator's attempt id, when it sent one.
    pub attempt: Option<AttemptId>,
    /// The connector GetPin named for this payment (`pin_connector`, contract
    /// v1.2 §4), when the caller sent one. Nothing written to the customer's
    /// hash depends on it: the experiment counts it (followed when it equals
    /// `connector`, overridden otherwise).
    pub pin_connector: Option<Connector>,
}

/// The text fields of one outcome as a caller sends them (a RecordOutcome
/// request, or a row of `sticky-routing import`), before validation.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawOutcome<'a> {
    pub merchant_id: &'a str,
    pub customer_id: &'a str,
    pub payment_method: &'a str,
    pub payment_method_type: &'a str,
    pub connector: &'a str,
    pub attempt_id: &'a str,
    /// Empty when GetPin named no connector or was not asked.
    pub pin_connector: &'a str,
}

impl RecordCommand {
    /// Validates `raw` field by field, in the request's declaration order,
    /// reporting the first bad one by name; `outcome` is read in its place
    /// (after the connector), each caller from its own spelling of it. One
    /// function for every way in, so an import row and a request obey the
    /// same rules.
    pub fn parse(
        raw: RawOutcome<'_>,
        outcome: impl FnOnce() -> Result<Outcome, InvalidInput>,
    ) -> Result<Self, InvalidInput> {
        let merchant = MerchantId::parse(raw.merchant_id)?;
        let customer = CustomerId::parse(raw.customer_id)?;
        let method = PaymentMethod::parse(raw.payment_method)?;
        let method_type = PaymentMethodType::parse(raw.payment_method_type)?;
        let connector = Connector::parse(raw.connector)?;
        // The combo's length is reported as `connector` (field 5), so it is
        // checked before `outcome` (field 6): a connector that fits alone
        // but not with the method is the first bad field.
        let combo = Combo::new(&method, &method_type, &connector)?;
        let outcome = outcome()?;
        let attempt = AttemptId::parse(raw.attempt_id)?;
        // Field 8: a connector by `connector`'s rules, or nothing when empty.
        let pin_connector = match raw.pin_connector {
            "" => None,
            named => Some(Connector::parse_as(named, "pin_connector")?),
        };
        Ok(Self {
            tenant: Tenant::DEFAULT,
            merchant,
            customer,
            combo,
            connector,
            outcome,
            attempt,
            pin_connector,
        })
    }
}

impl RecordCommand {
    /// The same outcome, for `tenant`.
    pub fn in_tenant(self, tenant: Tenant) -> Self {
        Self { tenant, ..self }
    }
}
