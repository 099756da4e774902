//! Names of the kernel's error numbers: the user-visible ones
//! (`asm-generic/errno-base.h` and `asm-generic/errno.h`, which x86_64
//! and arm64 both use) and the kernel-internal ones of
//! `include/linux/errno.h` that functions inside the kernel return
//! (`ERESTARTSYS`, `ENOTSUPP` ...).

/// The user-visible errnos, from the C library's constants (the same
/// numbers as the kernel's generic headers on x86_64 and arm64).
const USER: &[(i32, &str)] = &[
    (libc::EPERM, "EPERM"),
    (libc::ENOENT, "ENOENT"),
    (libc::ESRCH, "ESRCH"),
    (libc::EINTR, "EINTR"),
    (libc::EIO, "EIO"),
    (libc::ENXIO, "ENXIO"),
    (libc::E2BIG, "E2BIG"),
    (libc::ENOEXEC, "ENOEXEC"),
    (libc::EBADF, "EBADF"),
    (libc::ECHILD, "ECHILD"),
    (libc::EAGAIN, "EAGAIN"),
    (libc::ENOMEM, "ENOMEM"),
    (libc::EACCES, "EACCES"),
    (libc::EFAULT, "EFAULT"),
    (libc::ENOTBLK, "ENOTBLK"),
    (libc::EBUSY, "EBUSY"),
    (libc::EEXIST, "EEXIST"),
    (libc::EXDEV, "EXDEV"),
    (libc::ENODEV, "ENODEV"),
    (libc::ENOTDIR, "ENOTDIR"),
    (libc::EISDIR, "EISDIR"),
    (libc::EINVAL, "EINVAL"),
    (libc::ENFILE, "ENFILE"),
    (libc::EMFILE, "EMFILE"),
    (libc::ENOTTY, "ENOTTY"),
    (libc::ETXTBSY, "ETXTBSY"),
    (libc::EFBIG, "EFBIG"),
    (libc::ENOSPC, "ENOSPC"),
    (libc::ESPIPE, "ESPIPE"),
    (libc::EROFS, "EROFS"),
    (libc::EMLINK, "EMLINK"),
    (libc::EPIPE, "EPIPE"),
    (libc::EDOM, "EDOM"),
    (libc::ERANGE, "ERANGE"),
    (libc::EDEADLK, "EDEADLK"),
    (libc::ENAMETOOLONG, "ENAMETOOLONG"),
    (libc::ENOLCK, "ENOLCK"),
    (libc::ENOSYS, "ENOSYS"),
    (libc::ENOTEMPTY, "ENOTEMPTY"),
    (libc::ELOOP, "ELOOP"),
    (libc::ENOMSG, "ENOMSG"),
    (libc::EIDRM, "EIDRM"),
    (libc::ECHRNG, "ECHRNG"),
    (libc::EL2NSYNC, "EL2NSYNC"),
    (libc::EL3HLT, "EL3HLT"),
    (libc::EL3RST, "EL3RST"),
    (libc::ELNRNG, "ELNRNG"),
    (libc::EUNATCH, "EUNATCH"),
    (libc::ENOCSI, "ENOCSI"),
    (libc::EL2HLT, "EL2HLT"),
    (libc::EBADE, "EBADE"),
    (libc::EBADR, "EBADR"),
    (libc::EXFULL, "EXFULL"),
    (libc::ENOANO, "ENOANO"),
    (libc::EBADRQC, "EBADRQC"),
    (libc::EBADSLT, "EBADSLT"),
    (libc::EBFONT, "EBFONT"),
    (libc::ENOSTR, "ENOSTR"),
    (libc::ENODATA, "ENODATA"),
    (libc::ETIME, "ETIME"),
    (libc::ENOSR, "ENOSR"),
    (libc::ENONET, "ENONET"),
    (libc::ENOPKG, "ENOPKG"),
    (libc::EREMOTE, "EREMOTE"),
    (libc::ENOLINK, "ENOLINK"),
    (libc::EADV, "EADV"),
    (libc::ESRMNT, "ESRMNT"),
    (libc::ECOMM, "ECOMM"),
    (libc::EPROTO, "EPROTO"),
    (libc::EMULTIHOP, "EMULTIHOP"),
    (libc::EDOTDOT, "EDOTDOT"),
    (libc::EBADMSG, "EBADMSG"),
    (libc::EOVERFLOW, "EOVERFLOW"),
    (libc::ENOTUNIQ, "ENOTUNIQ"),
    (libc::EBADFD, "EBADFD"),
    (libc::EREMCHG, "EREMCHG"),
    (libc::ELIBACC, "ELIBACC"),
    (libc::ELIBBAD, "ELIBBAD"),
    (libc::ELIBSCN, "ELIBSCN"),
    (libc::ELIBMAX, "ELIBMAX"),
    (libc::ELIBEXEC, "ELIBEXEC"),
    (libc::EILSEQ, "EILSEQ"),
    (libc::ERESTART, "ERESTART"),
    (libc::ESTRPIPE, "ESTRPIPE"),
    (libc::EUSERS, "EUSERS"),
    (libc::ENOTSOCK, "ENOTSOCK"),
    (libc::EDESTADDRREQ, "EDESTADDRREQ"),
    (libc::EMSGSIZE, "EMSGSIZE"),
    (libc::EPROTOTYPE, "EPROTOTYPE"),
    (libc::ENOPROTOOPT, "ENOPROTOOPT"),
    (libc::EPROTONOSUPPORT, "EPROTONOSUPPORT"),
    (libc::ESOCKTNOSUPPORT, "ESOCKTNOSUPPORT"),
    (libc::EOPNOTSUPP, "EOPNOTSUPP"),
    (libc::EPFNOSUPPORT, "EPFNOSUPPORT"),
    (libc::EAFNOSUPPORT, "EAFNOSUPPORT"),
    (libc::EADDRINUSE, "EADDRINUSE"),
    (libc::EADDRNOTAVAIL, "EADDRNOTAVAIL"),
    (libc::ENETDOWN, "ENETDOWN"),
    (libc::ENETUNREACH, "ENETUNREACH"),
    (libc::ENETRESET, "ENETRESET"),
    (libc::ECONNABORTED, "ECONNABORTED"),
    (libc::ECONNRESET, "ECONNRESET"),
    (libc::ENOBUFS, "ENOBUFS"),
    (libc::EISCONN, "EISCONN"),
    (libc::ENOTCONN, "ENOTCONN"),
    (libc::ESHUTDOWN, "ESHUTDOWN"),
    (libc::ETOOMANYREFS, "ETOOMANYREFS"),
    (libc::ETIMEDOUT, "ETIMEDOUT"),
    (libc::ECONNREFUSED, "ECONNREFUSED"),
    (libc::EHOSTDOWN, "EHOSTDOWN"),
    (libc::EHOSTUNREACH, "EHOSTUNREACH"),
    (libc::EALREADY, "EALREADY"),
    (libc::EINPROGRESS, "EINPROGRESS"),
    (libc::ESTALE, "ESTALE"),
    (libc::EUCLEAN, "EUCLEAN"),
    (libc::ENOTNAM, "ENOTNAM"),
    (libc::ENAVAIL, "ENAVAIL"),
    (libc::EISNAM, "EISNAM"),
    (libc::EREMOTEIO, "EREMOTEIO"),
    (libc::EDQUOT, "EDQUOT"),
    (libc::ENOMEDIUM, "ENOMEDIUM"),
    (libc::EMEDIUMTYPE, "EMEDIUMTYPE"),
    (libc::ECANCELED, "ECANCELED"),
    (libc::ENOKEY, "ENOKEY"),
    (libc::EKEYEXPIRED, "EKEYEXPIRED"),
    (libc::EKEYREVOKED, "EKEYREVOKED"),
    (libc::EKEYREJECTED, "EKEYREJECTED"),
    (libc::EOWNERDEAD, "EOWNERDEAD"),
    (libc::ENOTRECOVERABLE, "ENOTRECOVERABLE"),
    (libc::ERFKILL, "ERFKILL"),
    (libc::EHWPOISON, "EHWPOISON"),
];

/// The kernel's internal errnos (`include/linux/errno.h`), never seen by
/// user space but returned inside the kernel.
const KERNEL: &[(i32, &str)] = &[
    (512, "ERESTARTSYS"),
    (513, "ERESTARTNOINTR"),
    (514, "ERESTARTNOHAND"),
    (515, "ENOIOCTLCMD"),
    (516, "ERESTART_RESTARTBLOCK"),
    (517, "EPROBE_DEFER"),
    (518, "EOPENSTALE"),
    (519, "ENOPARAM"),
    (521, "EBADHANDLE"),
    (522, "ENOTSYNC"),
    (523, "EBADCOOKIE"),
    (524, "ENOTSUPP"),
    (525, "ETOOSMALL"),
    (526, "ESERVERFAULT"),
    (527, "EBADTYPE"),
    (528, "EJUKEBOX"),
    (529, "EIOCBQUEUED"),
    (530, "ERECALLCONFLICT"),
    (531, "ENOGRACE"),
];

/// The name of errno `n` (positive, as in `ENOENT` for 2), if it has one.
pub fn errno_name(n: i32) -> Option<&'static str> {
    USER.iter()
        .chain(KERNEL)
        .find(|(v, _)| *v == n)
        .map(|(_, name)| *name)
}

#[cfg(test)]
mod tests {
    use super::errno_name;

    #[test]
    fn names_user_and_kernel_errnos() {
        assert_eq!(errno_name(2), Some("ENOENT"));
        assert_eq!(errno_name(13), Some("EACCES"));
        assert_eq!(errno_name(111), Some("ECONNREFUSED"));
        assert_eq!(errno_name(512), Some("ERESTARTSYS"));
        assert_eq!(errno_name(524), Some("ENOTSUPP"));
        assert_eq!(errno_name(0), None);
        assert_eq!(errno_name(4000), None);
    }
}
