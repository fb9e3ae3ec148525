//! The one mapping from errors to `tonic::Status`.

use tonic::Status;

use crate::domain::InvalidInput;
use crate::storage::StorageError;

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::Invalid(invalid) => Status::invalid_argument(invalid.to_string()),
            ApiError::Storage(StorageError::Unavailable(why)) => {
                Status::unavailable(format!("redis unavailable: {why}"))
            }
            ApiError::Storage(StorageError::DeadlineExceeded) => {
                Status::deadline_exceeded("the deadline passed before redis answered")
            }
            ApiError::Storage(StorageError::Unexpected(why)) => {
                Status::internal(format!("unexpected redis reply: {why}"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn each_error_gets_its_code() {
        let invalid: Status =
            ApiError::from(InvalidInput::new("customer_id", "must not be empty")).into();
        assert_eq!(invalid.code(), Code::InvalidArgument);
        assert_eq!(invalid.message(), "customer_id: must not be empty");
        let cases = [
            (StorageError::Unavailable("down".into()), Code::Unavailable),
            (StorageError::DeadlineExceeded, Code::DeadlineExceeded),
            (StorageError::Unexpected("odd".into()), Code::Internal),
        ];
        for (error, code) in cases {
            assert_eq!(Status::from(ApiError::from(error)).code(), code);
        }
    }
}
