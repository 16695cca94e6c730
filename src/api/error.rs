//! OpenAI's error envelope and the request-validation error that names the offending field.

use serde::{Deserialize, Serialize};

/// `{"error": {"message", "type", "param", "code"}}`: every JSON error the relay answers with.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    pub message: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub param: Option<String>,
    pub code: Option<String>,
}

/// A rejected request field: which one (`param`, e.g. `tools[0].name`) and why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct FieldError {
    pub param: String,
    pub message: String,
    pub code: Option<&'static str>,
}

impl FieldError {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            param: param.into(),
            message: message.into(),
            code: None,
        }
    }

    pub fn invalid_value(param: impl Into<String>, message: impl Into<String>) -> Self {
        FieldError {
            code: Some("invalid_value"),
            ..Self::new(param, message)
        }
    }

    pub fn missing(param: impl Into<String>) -> Self {
        let param = param.into();
        FieldError {
            message: format!("Missing required parameter: '{param}'."),
            code: Some("missing_required_parameter"),
            param,
        }
    }

    pub fn unknown(param: impl Into<String>) -> Self {
        let param = param.into();
        FieldError {
            message: format!("Unknown parameter: '{param}'."),
            code: Some("unknown_parameter"),
            param,
        }
    }

    pub fn unsupported(param: impl Into<String>, why: impl Into<String>) -> Self {
        FieldError {
            code: Some("unsupported_parameter"),
            ..Self::new(param, why)
        }
    }
}
