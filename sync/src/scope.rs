//! The scope type on its own, below both `runtime` (which gives `std`'s scope this type) and
//! `thread` (which implements it).

/// A scope for threads that borrow from the caller: `std::thread::Scope`.
#[repr(transparent)]
pub struct Scope<'scope, 'env: 'scope> {
    pub(crate) inner: std::thread::Scope<'scope, 'env>,
}
