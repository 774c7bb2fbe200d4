//! The one error type every backend translates its failures into.
//!
//! SQLite's busy and constraint errors and DynamoDB's `ConditionalCheckFailedException` end
//! here, so the poller, worker and API decide what to do from the kind alone: a `Conflict`
//! is a lost race and is expected, `Unavailable` is worth a retry, `Invalid` is the caller's
//! fault. The backend's own error stays reachable through `source`.

/// Boxed cause of a backend failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store failure, translated at the backend's boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The item does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// A conditional write's condition failed: someone else changed the item first.
    #[error("conflict: {message}")]
    Conflict {
        /// What condition failed.
        message: String,
    },
    /// The backend could not be reached or is overloaded; the call may be retried.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed.
        message: String,
        /// The backend's own error.
        #[source]
        source: Option<BoxError>,
    },
    /// The request itself is invalid for this store.
    #[error("invalid {field}: {message}")]
    Invalid {
        /// The field at fault.
        field: String,
        /// Why it is refused.
        message: String,
    },
}

impl StoreError {
    /// A conflict with a message.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict {
            message: message.into(),
        }
    }

    /// An unavailable error carrying its cause.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Self::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// An invalid-input error naming the field.
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::Invalid {
            field: field.into(),
            message: message.into(),
        }
    }

    /// True for a failed condition.
    pub fn is_conflict(&self) -> bool {
        matches!(self, Self::Conflict { .. })
    }

    /// True for a missing item.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::NotFound(_))
    }
}

/// Result of a store call.
pub type StoreResult<T> = Result<T, StoreError>;

/// A configuration value refused before a component starts, naming the component and the
/// field, so the operator knows which flag or variable to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {component} config `{field}`: {message}")]
pub struct ConfigError {
    /// The component whose config it is: `poller`, `worker`.
    pub component: &'static str,
    /// The field at fault.
    pub field: &'static str,
    /// Why it is refused.
    pub message: String,
}

impl ConfigError {
    /// A refusal of `component`'s `field`.
    pub fn new(component: &'static str, field: &'static str, message: impl Into<String>) -> Self {
        Self {
            component,
            field,
            message: message.into(),
        }
    }
}
