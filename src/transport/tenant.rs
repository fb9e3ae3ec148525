//! A call's tenant, from its `x-tenant-id` metadata (contract v1.2,
//! "Tenants"): read and checked before the handler reads its request, so a
//! call refused here reads and writes nothing.

use tonic::metadata::MetadataMap;

use super::status::ApiError;
use crate::domain::InvalidInput;
use crate::domain::tenant::{TENANT_HEADER, Tenant, TenantAllowlist};

/// The call's tenant: the default one without the header (or with an
/// empty one); `INVALID_ARGUMENT` naming the header for a value that is not
/// a tenant id or for two values; `PERMISSION_DENIED` for a valid id that
/// `allowed` does not list. Validation comes first, so `a.b` is invalid
/// whatever the list says.
pub fn call_tenant(metadata: &MetadataMap, allowed: &TenantAllowlist) -> Result<Tenant, ApiError> {
    let mut values = metadata.get_all(TENANT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(Tenant::DEFAULT);
    };
    if values.next().is_some() {
        return Err(InvalidInput::new(
            TENANT_HEADER,
            "must be sent once; this call has two values",
        )
        .into());
    }
    // A value that is not visible ASCII is no tenant id either.
    let text = value.to_str().map_err(|_| {
        InvalidInput::new(
            TENANT_HEADER,
            "may hold only ASCII letters, digits, `-` and `_`",
        )
    })?;
    let tenant = Tenant::parse(text)?;
    if !allowed.allows(&tenant) {
        return Err(ApiError::TenantNotAllowed(tenant));
    }
    Ok(tenant)
}

#[cfg(test)]
mod tests {
    use tonic::Code;
    use tonic::metadata::MetadataValue;

    use super::*;

    fn with(values: &[&str]) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        for value in values {
            metadata.append(TENANT_HEADER, MetadataValue::try_from(*value).unwrap());
        }
        metadata
    }

    fn code(result: Result<Tenant, ApiError>) -> Code {
        tonic::Status::from(result.unwrap_err()).code()
    }

    #[test]
    fn absent_or_empty_is_the_default_tenant() {
        let any = TenantAllowlist::ANY;
        assert_eq!(
            call_tenant(&MetadataMap::new(), &any).unwrap(),
            Tenant::DEFAULT
        );
        assert_eq!(call_tenant(&with(&[""]), &any).unwrap(), Tenant::DEFAULT);
        assert_eq!(call_tenant(&with(&[" "]), &any).unwrap(), Tenant::DEFAULT);
        let listed = TenantAllowlist::parse("acme").unwrap();
        assert_eq!(
            call_tenant(&MetadataMap::new(), &listed).unwrap(),
            Tenant::DEFAULT
        );
    }

    #[test]
    fn a_valid_tenant_is_read_and_checked_against_the_list() {
        let listed = TenantAllowlist::parse("acme").unwrap();
        assert_eq!(
            call_tenant(&with(&[" acme "]), &listed).unwrap(),
            Tenant::parse("acme").unwrap()
        );
        let denied = call_tenant(&with(&["Acme"]), &listed);
        let status = tonic::Status::from(denied.unwrap_err());
        assert_eq!(status.code(), Code::PermissionDenied);
        assert!(
            status.message().starts_with("x-tenant-id: "),
            "{}",
            status.message()
        );
        assert!(status.message().contains("STICKY_ROUTING_TENANTS"));
    }

    #[test]
    fn invalid_or_repeated_values_are_invalid_before_the_list_is_asked() {
        let listed = TenantAllowlist::parse("acme").unwrap();
        for metadata in [
            with(&["a.b"]),
            with(&["acme", "acme"]),
            with(&[&"a".repeat(65)]),
        ] {
            let status = tonic::Status::from(call_tenant(&metadata, &listed).unwrap_err());
            assert_eq!(status.code(), Code::InvalidArgument);
            assert!(
                status.message().starts_with("x-tenant-id: "),
                "{}",
                status.message()
            );
        }
        let mut binary = MetadataMap::new();
        binary.insert(
            TENANT_HEADER,
            MetadataValue::try_from(&b"caf\xc3\xa9"[..]).unwrap(),
        );
        assert_eq!(
            code(call_tenant(&binary, &TenantAllowlist::ANY)),
            Code::InvalidArgument
        );
    }
}
