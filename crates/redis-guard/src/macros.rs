//! Helpers shared by the middlewares, in one named place (as tower-http's `src/macros.rs`).

/// The items inside, each compiled when any middleware is (the engine under them), as tokio's
/// `cfg_rt!`: one list of features, not an attribute per item.
macro_rules! cfg_middleware {
    ($($item:item)*) => {
        $(
            #[cfg(any(
                feature = "rate-limit",
                feature = "session",
                feature = "cache",
                feature = "idempotency"
            ))]
            $item
        )*
    };
}

/// `get_ref`, `get_mut` and `into_inner` for a middleware service whose wrapped service is its
/// field `inner` of type `S`.
#[cfg(any(
    feature = "rate-limit",
    feature = "session",
    feature = "cache",
    feature = "idempotency"
))]
macro_rules! define_inner_service_accessors {
    () => {
        /// The inner service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The inner service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// Consumes the wrapper, returning the inner service.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}

/// A middleware's named `ResponseFuture<S, ReqBody>`: a public, pinned wrapper around its private
/// state machine `State<S, ReqBody>` (pin-project-lite, projected as `StateProj`), so the states
/// never become public API, and a `Debug` that shows no internals. Takes the future's docs,
/// then, optionally, more bounds (`where { S::Response: Trait, }`), then the state enum's
/// variants.
#[cfg(any(feature = "rate-limit", feature = "session", feature = "idempotency"))]
macro_rules! define_response_future {
    ($(#[$doc:meta])* $(where { $($bound:tt)* })? states { $($variants:tt)* }) => {
        pin_project_lite::pin_project! {
            $(#[$doc])*
            pub struct ResponseFuture<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>>,
                $($($bound)*)?
            {
                #[pin]
                state: State<S, ReqBody>,
            }
        }

        pin_project_lite::pin_project! {
            #[project = StateProj]
            enum State<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>>,
                $($($bound)*)?
            {
                $($variants)*
            }
        }

        impl<S, ReqBody> std::fmt::Debug for ResponseFuture<S, ReqBody>
        where
            S: tower_service::Service<http::Request<ReqBody>>,
            $($($bound)*)?
        {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("ResponseFuture").finish_non_exhaustive()
            }
        }
    };
}

/// Consuming setters: `fn name(value: Type) => field.path;` becomes
/// `fn name(mut self, value: Type) -> Self`, storing `value` in `self.field.path`, with the docs,
/// attributes and visibility written before it.
#[cfg(any(
    feature = "rate-limit",
    feature = "session",
    feature = "cache",
    feature = "idempotency"
))]
macro_rules! setters {
    ($($(#[$attr:meta])* $vis:vis fn $name:ident($value:ident: $ty:ty) => $($field:ident).+;)*) => {
        $(
            $(#[$attr])*
            $vis fn $name(mut self, $value: $ty) -> Self {
                self.$($field).+ = $value;
                self
            }
        )*
    };
}

/// The tower `Layer` impl of a middleware layer whose settings sit in `self.$field` (an `Arc`):
/// each service gets `$service::new(inner, settings)`, and the layer's `Debug` shows the settings.
#[cfg(any(
    feature = "rate-limit",
    feature = "session",
    feature = "cache",
    feature = "idempotency"
))]
macro_rules! impl_layer {
    ($layer:ident => $service:ident, $field:ident) => {
        impl<S> tower_layer::Layer<S> for $layer {
            type Service = $service<S>;

            fn layer(&self, inner: S) -> Self::Service {
                $service::new(inner, std::sync::Arc::clone(&self.$field))
            }
        }

        impl std::fmt::Debug for $layer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Debug::fmt(&self.$field, f)
            }
        }
    };
}

/// The doc example of one user operation, as `limiter_operations!` and `store_operations!` write
/// one per type: `setup` is `[fence, imports, the line that makes the value]`, then the body's
/// lines, inside an async `main` that returns a `Result`.
#[cfg(any(feature = "rate-limit", feature = "session"))]
macro_rules! operation_example {
    ([$fence:literal, $uses:literal, $make:literal], $($body:literal),* $(,)?) => {
        concat!(
            "```", $fence, "\n",
            $uses,
            "# #[tokio::main(flavor = \"current_thread\")]\n",
            "# async fn main() -> Result<(), Box<dyn std::error::Error>> {\n",
            $make, "\n",
            $($body, "\n",)*
            "# Ok(()) }\n",
            "```",
        )
    };
}
