//! Container and Kubernetes pod identity from a process's cgroup path (`/proc/PID/cgroup`).
//!
//! Shapes recognised (cgroup v1 and v2, cgroupfs and systemd drivers):
//! `/docker/<id>`, `/system.slice/docker-<id>.scope`, `.../cri-containerd-<id>.scope`,
//! `.../crio-<id>.scope`, `/kubepods/burstable/pod<uid>/<id>`,
//! `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_with_underscores>.slice/...`.

/// The 64-hex-digit container id in a cgroup path, if any.
pub fn container_id(cgroup: &str) -> Option<String> {
    cgroup
        .split(['/', '\n'])
        .rev()
        .filter_map(|seg| {
            let seg = seg.strip_suffix(".scope").unwrap_or(seg);
            let id = seg.rsplit(['-', ':']).next()?;
            (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_string())
        })
        .next()
}

/// The Kubernetes pod UID in a cgroup path, if any (with dashes, as the API shows it).
pub fn pod_uid(cgroup: &str) -> Option<String> {
    cgroup.split(['/', '\n']).find_map(|seg| {
        let at = seg.rfind("pod")?;
        let rest = &seg[at + 3..];
        let rest = rest.strip_suffix(".slice").unwrap_or(rest);
        let uid = rest.replace('_', "-");
        let is_uid = uid.len() == 36
            && uid.bytes().enumerate().all(|(i, b)| match i {
                8 | 13 | 18 | 23 => b == b'-',
                _ => b.is_ascii_hexdigit(),
            });
        is_uid.then_some(uid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "3f1c5d0e9b8a7f6e5d4c3b2a19081726354453627180f9e8d7c6b5a493827160";

    #[test]
    fn docker_and_containerd() {
        assert_eq!(
            container_id(&format!("0::/system.slice/docker-{ID}.scope\n")).as_deref(),
            Some(ID)
        );
        assert_eq!(
            container_id(&format!("12:pids:/docker/{ID}\n")).as_deref(),
            Some(ID)
        );
        let k8s = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1d4c4e_2f4a_4b7e_9c1d_0a1b2c3d4e5f.slice/cri-containerd-{ID}.scope"
        );
        assert_eq!(container_id(&k8s).as_deref(), Some(ID));
        assert_eq!(
            pod_uid(&k8s).as_deref(),
            Some("6b1d4c4e-2f4a-4b7e-9c1d-0a1b2c3d4e5f")
        );
        let v1 =
            format!("4:memory:/kubepods/burstable/pod6b1d4c4e-2f4a-4b7e-9c1d-0a1b2c3d4e5f/{ID}");
        assert_eq!(
            pod_uid(&v1).as_deref(),
            Some("6b1d4c4e-2f4a-4b7e-9c1d-0a1b2c3d4e5f")
        );
        assert_eq!(container_id(&v1).as_deref(), Some(ID));
    }

    #[test]
    fn host_processes_have_none() {
        let host = "0::/user.slice/user-0.slice/session-1.scope\n";
        assert_eq!(container_id(host), None);
        assert_eq!(pod_uid(host), None);
    }
}
