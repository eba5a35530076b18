//! [`Sessions`]: gives each request its [`Session`].

use std::sync::Arc;

use super::body::ResponseBody;
use super::cookie_header::ReadCookie;
use super::future::ResponseFuture;
use super::handle::Session;
use super::shared::{Shared, Visit};

define_service! {
    /// The service [`SessionLayer`](super::SessionLayer) wraps around its inner service.
    ///
    /// Clones share the store and the settings.
    Sessions { shared: Shared }
}

impl_service! {
    Sessions => ResponseBody where { ResBody: Send + 'static, } |this, req| {
        let inner = this.take_ready();
        let shared = &this.shared;
        let cookie = shared.transport.read(req.headers(), &shared.cookie);
        let has_cookie = matches!(cookie, ReadCookie::Ids(_));
        let visit = Visit::of(&req, &shared.metadata);
        let mut req = req;
        let session = Session::new(Arc::clone(shared), cookie, visit);
        // A response cache inside this layer reads its mark: never store what this request
        // renders if it carried a session, or once its handler uses one.
        req.extensions_mut().insert(session.clone());
        if shared.expose_user && has_cookie {
            return ResponseFuture::preloading(session, inner, req);
        }
        ResponseFuture::calling(session, inner, req)
    }
}
