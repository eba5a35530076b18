//! Helpers shared by the middlewares, in one named place (as tower-http's `src/macros.rs`).

/// The items inside, each compiled when any middleware is (the engine under them), as tokio's
/// `cfg_rt!`: one list of features, not an attribute per item. `cfg_middleware!(unused_without
/// { … })` compiles its items in every build (public types every build has) and lets them go
/// unused when no middleware is on.
macro_rules! cfg_middleware {
    (@apply [$any:meta] cfg $($item:item)*) => {
        $(#[cfg($any)] $item)*
    };
    (@apply [$any:meta] unused_without $($item:item)*) => {
        $(#[cfg_attr(not($any), allow(dead_code))] $item)*
    };
    (@$how:ident $($item:item)*) => {
        cfg_middleware! {
            @apply [any(
                feature = "rate-limit",
                feature = "session",
                feature = "cache",
                feature = "idempotency"
            )]
            $how $($item)*
        }
    };
    (unused_without { $($item:item)* }) => {
        cfg_middleware! { @unused_without $($item)* }
    };
    ($($item:item)*) => {
        cfg_middleware! { @cfg $($item)* }
    };
}

// The helpers of every middleware, compiled with any of them.
cfg_middleware! {
    /// A middleware's service: `pub struct $name<S>` around the inner service `inner` and the
    /// layer's settings (an `Arc` in `$field`), cheap to clone; `new`, `get_ref`, `get_mut`,
    /// `into_inner`, a `Debug` of the inner service and the settings, and `take_ready`.
    macro_rules! define_service {
        ($(#[$doc:meta])* $name:ident { $field:ident: $settings:ty }) => {
            $(#[$doc])*
            #[derive(Clone)]
            pub struct $name<S> {
                inner: S,
                $field: std::sync::Arc<$settings>,
            }

            impl<S> $name<S> {
                pub(crate) fn new(inner: S, $field: std::sync::Arc<$settings>) -> Self {
                    Self { inner, $field }
                }

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
            }

            impl<S: Clone> $name<S> {
                /// The inner service made ready by `poll_ready`, to go with this request; a fresh
                /// clone stays for the next one.
                #[allow(dead_code)] // the rate-limit service takes it only for admitted requests
                fn take_ready(&mut self) -> S {
                    let clone = self.inner.clone();
                    std::mem::replace(&mut self.inner, clone)
                }
            }

            impl<S: std::fmt::Debug> std::fmt::Debug for $name<S> {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct(stringify!($name))
                        .field("inner", &self.inner)
                        .field(stringify!($field), &self.$field)
                        .finish()
                }
            }
        };
    }

    /// The `Service` impl of a middleware service defined by [`define_service!`]: over any inner
    /// HTTP service `S: Clone` (plus `$bounds`), answering `Response<$body<ResBody>>` with the inner
    /// error type and the module's `ResponseFuture<S, ReqBody>`; `poll_ready` is the inner
    /// service's, `call` is `$call` with the service as `$this` and the request as `$req`. (The
    /// rate-limit service writes its own: its body type is the inner body's `RateLimitBody`.)
    #[cfg(any(feature = "session", feature = "cache", feature = "idempotency"))]
    macro_rules! impl_service {
        ($name:ident => $body:ident where { $($bounds:tt)* } |$this:ident, $req:ident| $call:block) => {
            impl<S, ReqBody, ResBody> tower_service::Service<http::Request<ReqBody>> for $name<S>
            where
                S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<ResBody>>
                    + Clone,
                $($bounds)*
            {
                type Response = http::Response<$body<ResBody>>;
                type Error = S::Error;
                type Future = ResponseFuture<S, ReqBody>;

                fn poll_ready(
                    &mut self,
                    cx: &mut std::task::Context<'_>,
                ) -> std::task::Poll<Result<(), Self::Error>> {
                    tower_service::Service::poll_ready(&mut self.inner, cx)
                }

                fn call(&mut self, $req: http::Request<ReqBody>) -> Self::Future {
                    let $this = self;
                    $call
                }
            }
        };
    }

    /// A middleware's named `ResponseFuture<S, ReqBody>`: a public, pinned wrapper around its private
    /// state machine `State<S, ReqBody>` (pin-project-lite, projected as `StateProj`), so the states
    /// never become public API, and a `Debug` that shows no internals. Takes the future's docs, then
    /// (optionally) more bounds in `where { … }`, then the state enum's variants.
    macro_rules! define_response_future {
        ($(#[$doc:meta])* states { $($variants:tt)* }) => {
            define_response_future! { $(#[$doc])* where {} states { $($variants)* } }
        };
        ($(#[$doc:meta])* where { $($bounds:tt)* } states { $($variants:tt)* }) => {
            pin_project_lite::pin_project! {
                $(#[$doc])*
                pub struct ResponseFuture<S, ReqBody>
                where
                    S: tower_service::Service<http::Request<ReqBody>>,
                    $($bounds)*
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
                    $($bounds)*
                {
                    $($variants)*
                }
            }

            impl<S, ReqBody> std::fmt::Debug for ResponseFuture<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>>,
                $($bounds)*
            {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.debug_struct("ResponseFuture").finish_non_exhaustive()
                }
            }
        };
    }

    /// The `ResponseFuture<S, ReqBody>` of a layer that either passes a request (the inner call,
    /// its body wrapped by `ResponseBody::inner`) or does its own work for it, boxed (its state
    /// `$work`, made by `$make`): [`define_response_future!`] with those two states, their
    /// constructors `passing` and `$make`, and the `Future` impl. The layer's `ResponseBody<B>`
    /// is in scope.
    #[cfg(any(feature = "cache", feature = "idempotency"))]
    macro_rules! define_passing_future {
        ($(#[$doc:meta])* $work:ident by $make:ident) => {
            /// The layer's own work for a request: the response, its body the inner service's
            /// or the layer's bytes.
            type Work<S, ReqBody> = std::pin::Pin<
                Box<
                    dyn std::future::Future<
                            Output = Result<
                                http::Response<ResponseBody<crate::body::BodyOf<S, ReqBody>>>,
                                <S as tower_service::Service<http::Request<ReqBody>>>::Error,
                            >,
                        > + Send,
                >,
            >;

            define_response_future! {
                $(#[$doc])*
                where { S::Response: crate::body::HttpResponse, }
                states {
                    Passing { #[pin] fut: S::Future },
                    $work { fut: Work<S, ReqBody> },
                }
            }

            impl<S, ReqBody> ResponseFuture<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>>,
                S::Response: crate::body::HttpResponse,
            {
                pub(crate) fn passing(fut: S::Future) -> Self {
                    Self {
                        state: State::Passing { fut },
                    }
                }

                pub(crate) fn $make(fut: Work<S, ReqBody>) -> Self {
                    Self {
                        state: State::$work { fut },
                    }
                }
            }

            impl<S, ReqBody, B> std::future::Future for ResponseFuture<S, ReqBody>
            where
                S: tower_service::Service<http::Request<ReqBody>, Response = http::Response<B>>,
                B: http_body::Body,
            {
                type Output = Result<http::Response<ResponseBody<B>>, S::Error>;

                fn poll(
                    self: std::pin::Pin<&mut Self>,
                    cx: &mut std::task::Context<'_>,
                ) -> std::task::Poll<Self::Output> {
                    match self.project().state.project() {
                        StateProj::Passing { fut } => {
                            let res = std::task::ready!(fut.poll(cx))?;
                            std::task::Poll::Ready(Ok(res.map(ResponseBody::inner)))
                        }
                        StateProj::$work { fut } => fut.as_mut().poll(cx),
                    }
                }
            }
        };
    }

    /// Consuming setters: `fn name(value: Type) => field.path;` becomes
    /// `fn name(mut self, value: Type) -> Self`, storing `value` in `self.field.path`, with the docs,
    /// attributes and visibility written before it.
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

    /// The `http_body::Body` impl of a middleware's `ResponseBody<B>` over an inner body `B` of
    /// `Bytes`, with its error type: `poll_frame`, `is_end_stream` and `size_hint` are the blocks
    /// given, the body (pinned, or by reference) as `$this`.
    macro_rules! impl_body {
        (
            $name:ident,
            poll_frame(|$this:ident, $cx:ident| $poll:block),
            is_end_stream(|$end_this:ident| $end:block),
            size_hint(|$hint_this:ident| $hint:block) $(,)?
        ) => {
            impl<B> http_body::Body for $name<B>
            where
                B: http_body::Body<Data = bytes::Bytes>,
            {
                type Data = bytes::Bytes;
                type Error = B::Error;

                fn poll_frame(
                    self: std::pin::Pin<&mut Self>,
                    cx: &mut std::task::Context<'_>,
                ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, B::Error>>> {
                    let ($this, $cx) = (self, cx);
                    $poll
                }

                fn is_end_stream(&self) -> bool {
                    let $end_this = self;
                    $end
                }

                fn size_hint(&self) -> http_body::SizeHint {
                    let $hint_this = self;
                    $hint
                }
            }
        };
    }
}

/// A trait's methods on a pointer (`Arc<T>`) forwarded to `**self`: each listed
/// `name(arg: Type, …) -> Output;` becomes a `&self` method calling the same one on the target.
#[cfg(any(feature = "rate-limit", feature = "session"))]
macro_rules! forward_to_deref {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(fn $name(&self, $($arg: $ty),*) -> $out {
            (**self).$name($($arg),*)
        })*
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
