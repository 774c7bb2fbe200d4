//! The API's routes, built (not served) over an embedded store in a temporary directory and
//! driven with `tower::ServiceExt::oneshot`; time is a `ManualClock` standing at `T0`.

mod auth;
mod batch;
mod cancel;
mod create;
mod list;
mod logging;
mod ops;
mod store_errors;
mod support;
mod update;
