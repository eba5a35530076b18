//! Helpers shared by the middlewares, in one named place (as tower-http's `src/macros.rs`).

/// `get_ref`, `get_mut` and `into_inner` for a middleware service whose wrapped service is its
/// field `inner` of type `S`.
#[cfg(any(feature = "rate-limit", feature = "session"))]
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
/// never become public API, and a `Debug` that shows no internals. Takes the future's docs, then
/// the state enum's variants.
#[cfg(any(feature = "rate-limit", feature = "session"))]
macro_rules! define_response_future {
    ($(#[$doc:meta])* states { $($variants:tt)* }) => {
        pin_project_lite::pin_project! {
            $(#[$doc])*
            pub struct ResponseFuture<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>>,
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
            {
                $($variants)*
            }
        }

        impl<S, ReqBody> std::fmt::Debug for ResponseFuture<S, ReqBody>
        where
            S: tower_service::Service<http::Request<ReqBody>>,
        {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_struct("ResponseFuture").finish_non_exhaustive()
            }
        }
    };
}
