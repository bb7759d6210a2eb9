//! A streaming reader for the pickles that `_dump_snapshot` writes, built
//! to keep memory bounded on snapshots of hundreds of megabytes.
//!
//! It is a pickle machine (protocols 0 to 5) that understands the plain
//! Python values a snapshot holds (dicts, lists, tuples, strings, numbers)
//! and keeps anything else (class instances, bytes) as an opaque value.
//! Three kinds of dict are reduced as soon as they are complete, which is
//! when they are appended to their list:
//!
//! - a trace entry (it has `action`) becomes a small [`Event`] stored in
//!   its list, and its memo slot is dropped (torch never refers to a trace
//!   entry twice), so the dict itself does not stay in memory;
//! - a stack frame (`filename`, `line`, `name`) becomes a [`Frame`];
//! - a segment block (`size`, `state`, and `address` from torch 2.1 or
//!   `history` in torch 2.0) keeps only those fields, its requested size
//!   and its site.
//!
//! Frames lists are shared between entries with the same stack (torch
//! symbolises each distinct traceback once); each is reduced once to the
//! site it names, in place, so every entry that refers to it sees the site.
//! Memory is therefore linear in the number of trace entries (about 40
//! bytes each plus the memo) and in the distinct frames, not in the size of
//! the file.

use std::cell::RefCell;
use std::io::Read;
use std::rc::Rc;

use rustc_hash::FxHashMap;

/// A value on the pickle machine's stack.
#[derive(Debug, Clone)]
pub(super) enum V {
    None,
    Bool(bool),
    Int(i64),
    /// A float (`garbage_collection_threshold` of `allocator_settings`).
    Float(f64),
    Str(Rc<String>),
    Node(Rc<RefCell<Node>>),
    Tuple(Rc<Vec<V>>),
    /// Anything this reader does not need (objects, bytes, big integers).
    Opaque,
    /// A memo slot whose value was reduced away.
    Gone,
}

/// A mutable container, possibly reduced.
#[derive(Debug)]
pub(super) enum Node {
    List {
        items: Vec<V>,
        /// Trace entries appended to this list, reduced.
        events: Vec<Event>,
    },
    Dict(Vec<(V, V)>),
    Frame(Frame),
    /// A frames list reduced to the site it names and its Python frames.
    Site(Option<Rc<String>>, Option<Stack>),
    Block(Block),
    Set,
}

/// The Python frames of one stack, innermost first, as ids into the
/// snapshot's [`FrameTable`] (what step detection looks at).
pub(super) type Stack = Rc<[u32]>;

/// The distinct Python frames of a snapshot's stacks, interned as
/// `FILE:LINE in FUNCTION` (the site's form).
#[derive(Debug, Default)]
pub(super) struct FrameTable {
    /// Frame texts by id.
    pub names: Vec<String>,
    index: FxHashMap<String, u32>,
}

impl FrameTable {
    fn id(&mut self, f: &Frame) -> u32 {
        let text = format!("{}:{} in {}", f.filename, f.line, f.name);
        let next = self.names.len() as u32;
        *self.index.entry(text).or_insert_with_key(|t| {
            self.names.push(t.clone());
            next
        })
    }
}

/// A stack frame of a snapshot.
#[derive(Debug, Clone)]
pub(super) struct Frame {
    pub filename: Rc<String>,
    pub line: i64,
    pub name: Rc<String>,
}

/// What a trace entry's action says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Action {
    Alloc,
    FreeRequested,
    FreeCompleted,
    SegmentAlloc,
    SegmentFree,
    SegmentMap,
    SegmentUnmap,
    Oom,
    Snapshot,
    Other,
}

impl Action {
    fn parse(s: &str) -> Action {
        match s {
            "alloc" => Action::Alloc,
            "free_requested" => Action::FreeRequested,
            "free_completed" => Action::FreeCompleted,
            "segment_alloc" => Action::SegmentAlloc,
            "segment_free" => Action::SegmentFree,
            "segment_map" => Action::SegmentMap,
            "segment_unmap" => Action::SegmentUnmap,
            "oom" => Action::Oom,
            "snapshot" => Action::Snapshot,
            _ => Action::Other,
        }
    }
}

/// A reduced trace entry (40 bytes). The address is `device_free` for
/// `oom` entries.
#[derive(Debug, Clone)]
pub(super) struct Event {
    pub action: Action,
    addr: i64,
    size: i64,
    pub stream: i64,
    pub site: Option<Rc<String>>,
    /// Its Python frames (step detection).
    pub stack: Option<Stack>,
}

/// `addr` or `size` absent (torch never writes `i64::MIN`).
const ABSENT: i64 = i64::MIN;

impl Event {
    pub fn addr(&self) -> Option<i64> {
        (self.addr != ABSENT).then_some(self.addr)
    }

    pub fn size(&self) -> Option<i64> {
        (self.size != ABSENT).then_some(self.size)
    }
}

/// A reduced segment block. torch 2.0 wrote no `address` (the reader
/// derives it from the segment's) and kept the requested size and frames
/// under `history`.
#[derive(Debug, Clone)]
pub(super) struct Block {
    pub address: Option<i64>,
    pub size: Option<i64>,
    pub requested_size: Option<i64>,
    pub allocated: bool,
    pub site: Option<Rc<String>>,
}

/// Why a pickle could not be read, and at which byte.
#[derive(Debug)]
pub(super) struct PickleError {
    pub at: u64,
    pub message: String,
}

type R<T> = std::result::Result<T, PickleError>;

/// Frames whose file lies in these are library code, not the user's
/// allocation site.
const LIBRARY_PATHS: [&str; 6] = [
    "site-packages",
    "dist-packages",
    "/torch/",
    "/torch_npu/",
    "/lib/python",
    "<frozen",
];

/// Whether a frame is Python source: C++ frames (recorded with
/// `stacks="all"`, torch's default) name a `.cpp` / `.h` file, `??` or
/// nothing.
fn is_python(f: &Frame) -> bool {
    f.filename.ends_with(".py") || f.filename.contains(".py:")
}

/// C++ frames that every stack recorded with `stacks="all"` starts with:
/// the unwinder and the allocator itself, never the allocation site.
const CPP_MACHINERY: [&str; 6] = [
    "torch::unwind",
    "torch::CapturedTraceback",
    "gather_with_cpp",
    "CachingAllocator",
    "c10::",
    "at::",
];

/// The site a frames list names: the innermost Python frame outside
/// library code (`file:line in function`), else the innermost Python
/// frame, else (a stack of C++ frames only) the innermost frame outside
/// the unwinder and the allocator, else the innermost frame.
fn pick_site(frames: &[V], table: &mut FrameTable) -> (Option<Rc<String>>, Option<Stack>) {
    let frames: Vec<Frame> = frames
        .iter()
        .filter_map(|f| match f {
            V::Node(n) => match &*n.borrow() {
                Node::Frame(f) => Some(f.clone()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let python: Vec<u32> = frames
        .iter()
        .filter(|f| is_python(f))
        .map(|f| table.id(f))
        .collect();
    let stack = (!python.is_empty()).then(|| Stack::from(python));
    let user = frames
        .iter()
        .find(|f| is_python(f) && !LIBRARY_PATHS.iter().any(|p| f.filename.contains(p)));
    let site = user
        .or_else(|| frames.iter().find(|f| is_python(f)))
        .or_else(|| {
            frames
                .iter()
                .find(|f| !CPP_MACHINERY.iter().any(|m| f.name.contains(m)))
        })
        .or(frames.first())
        .map(|f| Rc::new(format!("{}:{} in {}", f.filename, f.line, f.name)));
    (site, stack)
}

/// The site of a `frames` value, reducing a frames list in place.
fn site_of(v: Option<&V>, table: &mut FrameTable) -> Option<Rc<String>> {
    site_and_stack(v, table).0
}

/// The site and the Python frames of a `frames` value, reducing a frames
/// list in place (once: lists are shared between entries).
fn site_and_stack(v: Option<&V>, table: &mut FrameTable) -> (Option<Rc<String>>, Option<Stack>) {
    let Some(V::Node(n)) = v else {
        return (None, None);
    };
    let reduced = match &*n.borrow() {
        Node::Site(s, st) => return (s.clone(), st.clone()),
        Node::List { items, .. } => pick_site(items, table),
        _ => return (None, None),
    };
    *n.borrow_mut() = Node::Site(reduced.0.clone(), reduced.1.clone());
    reduced
}

fn get<'a>(dict: &'a [(V, V)], key: &str) -> Option<&'a V> {
    dict.iter().find_map(|(k, v)| match k {
        V::Str(s) if s.as_str() == key => Some(v),
        _ => None,
    })
}

fn int(v: Option<&V>) -> Option<i64> {
    match v? {
        V::Int(i) => Some(*i),
        V::Bool(b) => Some(i64::from(*b)),
        _ => None,
    }
}

fn text(v: Option<&V>) -> Option<Rc<String>> {
    match v? {
        V::Str(s) => Some(s.clone()),
        _ => None,
    }
}

/// What a dict appended to a list reduces to.
enum Reduced {
    Event(Event),
    /// A trace entry the reader does not need.
    Drop,
    Node(Node),
    Keep,
}

fn reduce(dict: &[(V, V)], table: &mut FrameTable) -> Reduced {
    if let Some(action) = text(get(dict, "action")) {
        let action = Action::parse(&action);
        let addr = if action == Action::Oom {
            int(get(dict, "device_free"))
        } else {
            int(get(dict, "addr"))
        };
        if matches!(
            action,
            Action::FreeRequested | Action::Snapshot | Action::Other
        ) {
            // Nothing the trace needs: dropped, not kept.
            return Reduced::Drop;
        }
        let (site, stack) = site_and_stack(get(dict, "frames"), table);
        return Reduced::Event(Event {
            action,
            addr: addr.unwrap_or(ABSENT),
            size: int(get(dict, "size")).unwrap_or(ABSENT),
            stream: int(get(dict, "stream")).unwrap_or(0),
            site,
            stack,
        });
    }
    if let (Some(filename), Some(name)) = (text(get(dict, "filename")), text(get(dict, "name"))) {
        return Reduced::Node(Node::Frame(Frame {
            filename,
            line: int(get(dict, "line")).unwrap_or(0),
            name,
        }));
    }
    if let Some(state) = text(get(dict, "state"))
        && get(dict, "size").is_some()
    {
        // torch 2.0: `history` lists the block's allocations, the latest
        // last, each with `addr`, `real_size` and `frames`.
        let latest = get(dict, "history")
            .map(V::items)
            .and_then(|h| h.last().cloned());
        let from_history = |key: &str| latest.as_ref().and_then(|h| h.field(key));
        return Reduced::Node(Node::Block(Block {
            address: int(get(dict, "address")),
            size: int(get(dict, "size")),
            requested_size: int(get(dict, "requested_size"))
                .or_else(|| int(from_history("real_size").as_ref())),
            allocated: state.starts_with("active"),
            site: site_of(get(dict, "frames"), table)
                .or_else(|| site_of(from_history("frames").as_ref(), table)),
        }));
    }
    Reduced::Keep
}

/// The pickle machine.
struct Machine<Rd> {
    input: Rd,
    /// Read-ahead: `buf[pos..len]` is unread input.
    buf: Box<[u8]>,
    pos: usize,
    len: usize,
    at: u64,
    stack: Vec<V>,
    marks: Vec<usize>,
    memo: Vec<V>,
    /// Memo slot of each memoized container, to drop reduced entries.
    slot_of: FxHashMap<*const RefCell<Node>, u32>,
    hints: PlatformHints,
    frames: FrameTable,
}

/// Stack frames that name one allocator or the other: evidence of the
/// platform a snapshot was recorded on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct PlatformHints {
    /// Frames in CUDA code (`CUDACachingAllocator.cpp`, `c10::cuda::`,
    /// `torch/cuda/`).
    pub cuda: u64,
    /// Frames in torch_npu code (`torch_npu`, `c10_npu::`,
    /// `NPUCachingAllocator`).
    pub npu: u64,
}

impl PlatformHints {
    fn count(&mut self, f: &Frame) {
        let (file, name) = (f.filename.as_str(), f.name.as_str());
        if file.contains("torch_npu") || name.contains("c10_npu") || file.contains("NPUCaching") {
            self.npu += 1;
        } else if file.contains("CUDACaching")
            || file.contains("/torch/cuda/")
            || name.contains("c10::cuda::")
        {
            self.cuda += 1;
        }
    }
}

/// Reads one pickle from `input` and returns its top value.
#[cfg(test)]
pub(super) fn read<Rd: Read>(input: Rd) -> R<V> {
    read_snapshot(input).map(|(v, _, _)| v)
}

/// Reads one pickle from `input`: its top value, the platform its stack
/// frames point at, and its distinct Python frames.
pub(super) fn read_snapshot<Rd: Read>(input: Rd) -> R<(V, PlatformHints, FrameTable)> {
    let mut m = Machine {
        input,
        buf: vec![0u8; 1 << 16].into_boxed_slice(),
        pos: 0,
        len: 0,
        at: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Vec::new(),
        slot_of: FxHashMap::default(),
        hints: PlatformHints::default(),
        frames: FrameTable::default(),
    };
    let top = m.run()?;
    Ok((top, m.hints, m.frames))
}

fn node(n: Node) -> V {
    V::Node(Rc::new(RefCell::new(n)))
}

fn empty_list() -> Node {
    Node::List {
        items: Vec::new(),
        events: Vec::new(),
    }
}

impl<Rd: Read> Machine<Rd> {
    fn fail<T>(&self, message: impl Into<String>) -> R<T> {
        Err(PickleError {
            at: self.at,
            message: message.into(),
        })
    }

    /// Refills the read-ahead; `false` at the end of the input.
    fn refill(&mut self) -> R<bool> {
        loop {
            match self.input.read(&mut self.buf) {
                Ok(n) => {
                    self.pos = 0;
                    self.len = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return self.fail(format!("read error: {e}")),
            }
        }
    }

    fn truncated<T>(&self) -> R<T> {
        self.fail("the pickle ends early (truncated file?)")
    }

    fn byte(&mut self) -> R<u8> {
        if self.pos == self.len && !self.refill()? {
            return self.truncated();
        }
        let b = self.buf[self.pos];
        self.pos += 1;
        self.at += 1;
        Ok(b)
    }

    fn exact(&mut self, out: &mut [u8]) -> R<()> {
        let mut done = 0;
        while done < out.len() {
            if self.pos == self.len && !self.refill()? {
                return self.truncated();
            }
            let n = (out.len() - done).min(self.len - self.pos);
            out[done..done + n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            self.at += n as u64;
            done += n;
        }
        Ok(())
    }

    fn uint(&mut self, n: usize) -> R<u64> {
        let mut b = [0u8; 8];
        self.exact(&mut b[..n])?;
        Ok(u64::from_le_bytes(b))
    }

    /// `n` bytes; read in pieces so that a corrupt length cannot make one
    /// huge allocation up front.
    fn bytes(&mut self, n: u64) -> R<Vec<u8>> {
        let mut out = Vec::with_capacity(n.min(1 << 20) as usize);
        let mut left = n;
        while left > 0 {
            if self.pos == self.len && !self.refill()? {
                return self.truncated();
            }
            let k = (left.min((self.len - self.pos) as u64)) as usize;
            out.extend_from_slice(&self.buf[self.pos..self.pos + k]);
            self.pos += k;
            self.at += k as u64;
            left -= k as u64;
        }
        Ok(out)
    }

    fn string(&mut self, n: u64) -> R<V> {
        let raw = self.bytes(n)?;
        match String::from_utf8(raw) {
            Ok(s) => Ok(V::Str(Rc::new(s))),
            Err(_) => self.fail("a string is not UTF-8"),
        }
    }

    fn line(&mut self) -> R<String> {
        let mut out = Vec::new();
        loop {
            let b = self.byte()?;
            if b == b'\n' {
                break;
            }
            out.push(b);
        }
        String::from_utf8(out).or_else(|_| self.fail("a text argument is not UTF-8"))
    }

    fn pop(&mut self) -> R<V> {
        match self.stack.pop() {
            Some(v) => Ok(v),
            None => self.fail("malformed pickle: the stack is empty"),
        }
    }

    fn top(&mut self) -> R<&mut V> {
        let at = self.at;
        self.stack.last_mut().ok_or(PickleError {
            at,
            message: "malformed pickle: the stack is empty".to_owned(),
        })
    }

    /// Everything above the last mark, removing the mark.
    fn pop_mark(&mut self) -> R<Vec<V>> {
        let Some(mark) = self.marks.pop() else {
            return self.fail("malformed pickle: no mark");
        };
        if mark > self.stack.len() {
            return self.fail("malformed pickle: mark above the stack");
        }
        Ok(self.stack.split_off(mark))
    }

    fn memo_put(&mut self, index: u64) -> R<()> {
        let v = match self.stack.last() {
            Some(v) => v.clone(),
            None => return self.fail("malformed pickle: memoizing an empty stack"),
        };
        let Ok(i) = usize::try_from(index) else {
            return self.fail("memo index out of range");
        };
        if let V::Node(n) = &v {
            self.slot_of.insert(Rc::as_ptr(n), i as u32);
        }
        if i >= self.memo.len() {
            if i > self.memo.len() + (1 << 20) {
                return self.fail("memo index out of range");
            }
            self.memo.resize(i + 1, V::Gone);
        }
        self.memo[i] = v;
        Ok(())
    }

    fn memo_get(&mut self, index: u64) -> R<()> {
        let v = usize::try_from(index)
            .ok()
            .and_then(|i| self.memo.get(i))
            .cloned();
        match v {
            Some(V::Gone) => {
                self.fail("the pickle refers back to a trace entry, which this reader drops")
            }
            Some(v) => {
                self.stack.push(v);
                Ok(())
            }
            None => self.fail(format!("memo index {index} was never stored")),
        }
    }

    /// Drops the memo slot of a reduced trace entry.
    fn forget(&mut self, n: &Rc<RefCell<Node>>) {
        let ptr = Rc::as_ptr(n);
        if let Some(slot) = self.slot_of.remove(&ptr)
            // Only if the slot still holds this very node (an address can
            // be reused after a node is dropped).
            && let Some(v) = self.memo.get_mut(slot as usize)
            && matches!(v, V::Node(m) if Rc::ptr_eq(m, n))
        {
            *v = V::Gone;
        }
    }

    fn append(&mut self, list: &V, items: Vec<V>) -> R<()> {
        let V::Node(target) = list else {
            // Appending to an object (list subclass): ignore.
            return Ok(());
        };
        for item in items {
            let mut event = None;
            if let V::Node(child) = &item {
                let reduced = match &*child.borrow() {
                    Node::Dict(d) => reduce(d, &mut self.frames),
                    _ => Reduced::Keep,
                };
                match reduced {
                    Reduced::Event(e) => {
                        event = Some(e);
                        self.forget(child);
                    }
                    Reduced::Drop => {
                        self.forget(child);
                        continue;
                    }
                    Reduced::Node(n) => {
                        if let Node::Frame(f) = &n {
                            self.hints.count(f);
                        }
                        *child.borrow_mut() = n;
                    }
                    Reduced::Keep => {}
                }
            }
            match (&mut *target.borrow_mut(), event) {
                (Node::List { events, .. }, Some(e)) => events.push(e),
                (Node::List { items, .. }, None) => items.push(item),
                (Node::Set, _) => {}
                _ => return self.fail("malformed pickle: appending to a value that is not a list"),
            }
        }
        Ok(())
    }

    fn set_items(&mut self, dict: &V, items: Vec<V>) -> R<()> {
        if !items.len().is_multiple_of(2) {
            return self.fail("malformed pickle: odd number of dict items");
        }
        let V::Node(target) = dict else {
            return Ok(());
        };
        let mut target = target.borrow_mut();
        let Node::Dict(entries) = &mut *target else {
            return self.fail("malformed pickle: setting items of a value that is not a dict");
        };
        let mut it = items.into_iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            match entries.iter_mut().find(|(old, _)| same_key(old, &k)) {
                Some(slot) => slot.1 = v,
                None => entries.push((k, v)),
            }
        }
        Ok(())
    }

    fn run(&mut self) -> R<V> {
        loop {
            let op = self.byte()?;
            match op {
                0x80 => {
                    let _protocol = self.byte()?;
                }
                0x95 => {
                    let _frame_len = self.uint(8)?;
                }
                b'.' => return self.pop(),
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?.clone();
                    self.stack.push(v);
                }
                b'N' => self.stack.push(V::None),
                0x88 => self.stack.push(V::Bool(true)),
                0x89 => self.stack.push(V::Bool(false)),
                b'J' => {
                    let v = self.uint(4)? as u32 as i32;
                    self.stack.push(V::Int(i64::from(v)));
                }
                b'K' => {
                    let v = self.uint(1)?;
                    self.stack.push(V::Int(v as i64));
                }
                b'M' => {
                    let v = self.uint(2)?;
                    self.stack.push(V::Int(v as i64));
                }
                0x8a | 0x8b => {
                    let n = if op == 0x8a {
                        self.uint(1)?
                    } else {
                        self.uint(4)?
                    };
                    let raw = self.bytes(n)?;
                    self.stack.push(long(&raw));
                }
                b'I' | b'L' => {
                    let l = self.line()?;
                    let t = l.trim().trim_end_matches('L');
                    let v = match t {
                        "00" => V::Bool(false),
                        "01" => V::Bool(true),
                        _ => t.parse().map_or(V::Opaque, V::Int),
                    };
                    self.stack.push(v);
                }
                b'G' => {
                    let mut b = [0u8; 8];
                    self.exact(&mut b)?;
                    self.stack.push(V::Float(f64::from_be_bytes(b)));
                }
                b'F' => {
                    let l = self.line()?;
                    self.stack
                        .push(l.trim().parse::<f64>().map_or(V::Opaque, V::Float));
                }
                0x8c => {
                    let n = self.uint(1)?;
                    let s = self.string(n)?;
                    self.stack.push(s);
                }
                b'X' => {
                    let n = self.uint(4)?;
                    let s = self.string(n)?;
                    self.stack.push(s);
                }
                0x8d => {
                    let n = self.uint(8)?;
                    let s = self.string(n)?;
                    self.stack.push(s);
                }
                b'V' => {
                    let l = self.line()?;
                    self.stack.push(V::Str(Rc::new(l)));
                }
                b'U' | b'C' => {
                    let n = self.uint(1)?;
                    self.bytes(n)?;
                    self.stack.push(V::Opaque);
                }
                b'T' | b'B' => {
                    let n = self.uint(4)?;
                    self.bytes(n)?;
                    self.stack.push(V::Opaque);
                }
                0x8e | 0x96 => {
                    let n = self.uint(8)?;
                    self.bytes(n)?;
                    self.stack.push(V::Opaque);
                }
                b'S' => {
                    let l = self.line()?;
                    let t = l.trim();
                    let quoted = t.len() >= 2
                        && (t.starts_with('\'') && t.ends_with('\'')
                            || t.starts_with('"') && t.ends_with('"'));
                    let v = if quoted {
                        V::Str(Rc::new(t[1..t.len() - 1].to_owned()))
                    } else {
                        V::Opaque
                    };
                    self.stack.push(v);
                }
                b']' => self.stack.push(node(empty_list())),
                b'l' => {
                    let items = self.pop_mark()?;
                    let list = node(empty_list());
                    self.append(&list, items)?;
                    self.stack.push(list);
                }
                b'a' => {
                    let item = self.pop()?;
                    let list = self.top()?.clone();
                    self.append(&list, vec![item])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let list = self.top()?.clone();
                    self.append(&list, items)?;
                }
                b'}' => self.stack.push(node(Node::Dict(Vec::new()))),
                b'd' => {
                    let items = self.pop_mark()?;
                    let dict = node(Node::Dict(Vec::new()));
                    self.set_items(&dict, items)?;
                    self.stack.push(dict);
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let dict = self.top()?.clone();
                    self.set_items(&dict, vec![k, v])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let dict = self.top()?.clone();
                    self.set_items(&dict, items)?;
                }
                b')' => self.stack.push(V::Tuple(Rc::new(Vec::new()))),
                b't' => {
                    let items = self.pop_mark()?;
                    self.stack.push(V::Tuple(Rc::new(items)));
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    if self.stack.len() < n {
                        return self.fail("malformed pickle: the stack is empty");
                    }
                    let items = self.stack.split_off(self.stack.len() - n);
                    self.stack.push(V::Tuple(Rc::new(items)));
                }
                0x8f => self.stack.push(node(Node::Set)),
                0x90 => {
                    self.pop_mark()?;
                }
                0x91 => {
                    self.pop_mark()?;
                    self.stack.push(V::Opaque);
                }
                b'p' => {
                    let l = self.line()?;
                    let i = l.trim().parse().or_else(|_| self.fail("bad memo index"))?;
                    self.memo_put(i)?;
                }
                b'q' => {
                    let i = self.uint(1)?;
                    self.memo_put(i)?;
                }
                b'r' => {
                    let i = self.uint(4)?;
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = self.memo.len() as u64;
                    self.memo_put(i)?;
                }
                b'g' => {
                    let l = self.line()?;
                    let i = l.trim().parse().or_else(|_| self.fail("bad memo index"))?;
                    self.memo_get(i)?;
                }
                b'h' => {
                    let i = self.uint(1)?;
                    self.memo_get(i)?;
                }
                b'j' => {
                    let i = self.uint(4)?;
                    self.memo_get(i)?;
                }
                b'c' => {
                    self.line()?;
                    self.line()?;
                    self.stack.push(V::Opaque);
                }
                b'i' => {
                    self.line()?;
                    self.line()?;
                    self.pop_mark()?;
                    self.stack.push(V::Opaque);
                }
                0x93 | b'R' | 0x81 | b'b' => {
                    // STACK_GLOBAL, REDUCE, NEWOBJ, BUILD: two operands.
                    self.pop()?;
                    *self.top()? = V::Opaque;
                }
                0x92 => {
                    self.pop()?;
                    self.pop()?;
                    *self.top()? = V::Opaque;
                }
                b'o' => {
                    self.pop_mark()?;
                    self.stack.push(V::Opaque);
                }
                b'P' => {
                    self.line()?;
                    self.stack.push(V::Opaque);
                }
                b'Q' => *self.top()? = V::Opaque,
                0x82 => {
                    self.uint(1)?;
                    self.stack.push(V::Opaque);
                }
                0x83 => {
                    self.uint(2)?;
                    self.stack.push(V::Opaque);
                }
                0x84 => {
                    self.uint(4)?;
                    self.stack.push(V::Opaque);
                }
                0x97 => self.stack.push(V::Opaque),
                0x98 => {}
                _ => return self.fail(format!("unknown pickle opcode 0x{op:02x}")),
            }
        }
    }
}

fn same_key(a: &V, b: &V) -> bool {
    match (a, b) {
        (V::Str(x), V::Str(y)) => x == y,
        (V::Int(x), V::Int(y)) => x == y,
        _ => false,
    }
}

/// A little-endian two's-complement integer (LONG1 / LONG4); too wide for
/// an i64 is opaque.
fn long(raw: &[u8]) -> V {
    if raw.is_empty() {
        return V::Int(0);
    }
    if raw.len() > 8 {
        return V::Opaque;
    }
    let negative = raw[raw.len() - 1] & 0x80 != 0;
    let mut b = if negative { [0xffu8; 8] } else { [0u8; 8] };
    b[..raw.len()].copy_from_slice(raw);
    V::Int(i64::from_le_bytes(b))
}

impl V {
    /// The value of `key` when this is a dict.
    pub(super) fn field(&self, key: &str) -> Option<V> {
        let V::Node(n) = self else { return None };
        match &*n.borrow() {
            Node::Dict(d) => get(d, key).cloned(),
            _ => None,
        }
    }

    /// The items of a list (not counting reduced trace entries).
    pub(super) fn items(&self) -> Vec<V> {
        match self {
            V::Node(n) => match &*n.borrow() {
                Node::List { items, .. } => items.clone(),
                _ => Vec::new(),
            },
            V::Tuple(t) => t.as_ref().clone(),
            _ => Vec::new(),
        }
    }

    /// Takes the reduced trace entries out of a list.
    pub(super) fn take_events(&self) -> Vec<Event> {
        match self {
            V::Node(n) => match &mut *n.borrow_mut() {
                Node::List { events, .. } => std::mem::take(events),
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }

    /// The number of reduced trace entries of a list.
    pub(super) fn event_count(&self, pick: impl Fn(&Event) -> bool) -> usize {
        match self {
            V::Node(n) => match &*n.borrow() {
                Node::List { events, .. } => events.iter().filter(|e| pick(e)).count(),
                _ => 0,
            },
            _ => 0,
        }
    }

    pub(super) fn as_int(&self) -> Option<i64> {
        int(Some(self))
    }

    pub(super) fn as_float(&self) -> Option<f64> {
        match self {
            V::Float(x) => Some(*x),
            V::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub(super) fn as_str(&self) -> Option<Rc<String>> {
        text(Some(self))
    }

    /// The key/value pairs of a dict.
    pub(super) fn entries(&self) -> Vec<(V, V)> {
        let V::Node(n) = self else { return Vec::new() };
        match &*n.borrow() {
            Node::Dict(d) => d.clone(),
            _ => Vec::new(),
        }
    }

    /// The reduced segment block, if this is one.
    pub(super) fn as_block(&self) -> Option<Block> {
        let V::Node(n) = self else { return None };
        match &*n.borrow() {
            Node::Block(b) => Some(b.clone()),
            _ => None,
        }
    }

    pub(super) fn is_dict(&self) -> bool {
        matches!(self, V::Node(n) if matches!(&*n.borrow(), Node::Dict(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> R<V> {
        read(bytes)
    }

    #[test]
    fn protocol_2_dict_of_lists() {
        // pickle.dumps({"a": [1, -2, 300000], "b": "x"}, protocol=2)
        let bytes: &[u8] = b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01J\xfe\xff\xff\xffJ\xe0\x93\x04\x00eX\x01\x00\x00\x00bq\x03X\x01\x00\x00\x00xq\x04u.";
        let v = parse(bytes).unwrap();
        let a = v.field("a").unwrap().items();
        let ints: Vec<i64> = a.iter().filter_map(V::as_int).collect();
        assert_eq!(ints, vec![1, -2, 300_000]);
        assert!(matches!(v.field("b"), Some(V::Str(s)) if s.as_str() == "x"));
    }

    #[test]
    fn longs_and_errors() {
        assert!(matches!(long(&[0xff]), V::Int(-1)));
        assert!(matches!(long(&[0x00, 0x80]), V::Int(-32768)));
        assert!(matches!(long(&[1, 0, 0, 0, 0, 0, 0, 0, 1]), V::Opaque));
        let err = parse(b"\x80\x04}").unwrap_err();
        assert!(err.message.contains("ends early"), "{}", err.message);
        let err = parse(b"\x80\x04\xff").unwrap_err();
        assert!(err.message.contains("unknown pickle opcode 0xff"));
        assert_eq!(err.at, 3);
        let err = parse(b"e.").unwrap_err();
        assert!(err.message.contains("no mark"));
        let err = parse(b"h\x05.").unwrap_err();
        assert!(err.message.contains("memo index 5"));
    }

    #[test]
    fn entries_reduce_and_frames_lists_are_shared() {
        // pickle.dumps([{"action": "alloc", "addr": 16, "size": 4, "frames": F},
        //               {"action": "free_completed", "addr": 16, "size": 4,
        //                "frames": F}], protocol=4)
        // with F = [{"filename": "/x/site-packages/torch/a.py", "line": 1,
        //            "name": "f"}, {"filename": "train.py", "line": 7,
        //            "name": "step"}]: one list, shared through the memo.
        let mut p: Vec<u8> = b"\x80\x04\x95\xbb\x00\x00\x00\x00\x00\x00\x00]\x94(}\x94(\x8c\x06action\x94\x8c\x05alloc\x94\x8c\x04addr\x94K\x10\x8c\x04size\x94K\x04\x8c\x06frames\x94]\x94(}\x94(\x8c\x08filename\x94\x8c\x1b/x/site-packages/torch/a.py\x94\x8c\x04line\x94K\x01\x8c\x04name\x94\x8c\x01f\x94u}\x94(h\t\x8c\x08train.py\x94h\x0bK\x07h\x0c\x8c\x04step\x94ueu".to_vec();
        p.extend_from_slice(
            b"}\x94(h\x02\x8c\x0efree_completed\x94h\x04K\x10h\x05K\x04h\x06h\x07ue.",
        );
        let v = parse(&p).unwrap();
        let events = v.take_events();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0].action, Action::Alloc);
        assert_eq!(events[1].action, Action::FreeCompleted);
        assert_eq!((events[0].addr(), events[0].size()), (Some(16), Some(4)));
        for e in &events {
            assert_eq!(
                e.site.as_deref().map(String::as_str),
                Some("train.py:7 in step")
            );
        }
    }

    #[test]
    fn torch_2_0_blocks_keep_their_history_and_cpp_frames_are_skipped() {
        // pickle.dumps([{"size": 1024, "state": "active_allocated",
        //   "requested_size": 1000, "history": [{"addr": 4096, "real_size": 1000,
        //   "frames": [unwind (??), CUDACachingAllocator.cpp malloc,
        //              /x/model.py:3 fwd]}]},
        //  {"size": 512, "requested_size": 0, "state": "inactive"}], protocol=4)
        let bytes: &[u8] = b"\x80\x04\x95b\x01\x00\x00\x00\x00\x00\x00]\x94(}\x94(\x8c\x04size\x94M\x00\x04\x8c\x05state\x94\x8c\x10active_allocated\x94\x8c\x0erequested_size\x94M\xe8\x03\x8c\x07history\x94]\x94}\x94(\x8c\x04addr\x94M\x00\x10\x8c\x09real_size\x94M\xe8\x03\x8c\x06frames\x94]\x94(}\x94(\x8c\x08filename\x94\x8c\x02??\x94\x8c\x04line\x94K\x00\x8c\x04name\x94\x8c\x17torch::unwind::unwind()\x94u}\x94(h\x0e\x8c\x18CUDACachingAllocator.cpp\x94h\x10K\x00h\x11\x8cGc10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc\x94u}\x94(h\x0e\x8c\x0b/x/model.py\x94h\x10K\x03h\x11\x8c\x03fwd\x94ueuau}\x94(h\x02M\x00\x02h\x05K\x00h\x03\x8c\x08inactive\x94ue.";
        let (v, hints, _) = read_snapshot(bytes).unwrap();
        let blocks: Vec<Block> = v.items().iter().filter_map(V::as_block).collect();
        assert_eq!(
            blocks.len(),
            2,
            "the free block without history is a block too"
        );
        let b = &blocks[0];
        assert_eq!(b.address, None);
        assert_eq!((b.size, b.requested_size), (Some(1024), Some(1000)));
        assert!(b.allocated && !blocks[1].allocated);
        assert_eq!(
            b.site.as_deref().map(String::as_str),
            Some("/x/model.py:3 in fwd")
        );
        assert_eq!(hints.cuda, 1);
        assert_eq!(hints.npu, 0);
    }

    #[test]
    fn cpp_only_stacks_name_a_frame_outside_the_machinery() {
        let frame = |filename: &str, name: &str| {
            node(Node::Frame(Frame {
                filename: Rc::new(filename.to_owned()),
                line: 0,
                name: Rc::new(name.to_owned()),
            }))
        };
        let frames = [
            frame("??", "torch::unwind::unwind()"),
            frame(
                "memory_snapshot.cpp",
                "torch::cuda::(anonymous namespace)::gather_with_cpp()",
            ),
            frame(
                "",
                "c10::cuda::CUDACachingAllocator::Native::NativeCachingAllocator::malloc",
            ),
            frame("??", "torch::autograd::Engine::evaluate_function"),
        ];
        assert_eq!(
            pick_site(&frames, &mut FrameTable::default())
                .0
                .as_deref()
                .map(String::as_str),
            Some("??:0 in torch::autograd::Engine::evaluate_function")
        );
        assert_eq!(
            pick_site(&frames[..2], &mut FrameTable::default())
                .0
                .as_deref()
                .map(String::as_str),
            Some("??:0 in torch::unwind::unwind()"),
            "nothing else: the innermost frame"
        );
    }

    #[test]
    fn floats_keep_their_value() {
        // pickle.dumps({"t": 0.6, "e": True}, protocol=4)
        let bytes: &[u8] = b"\x80\x04\x95\x17\x00\x00\x00\x00\x00\x00\x00}\x94(\x8c\x01t\x94G?\xe3333333\x8c\x01e\x94\x88u.";
        let v = parse(bytes).unwrap();
        assert_eq!(v.field("t").and_then(|t| t.as_float()), Some(0.6));
        assert_eq!(v.field("e").and_then(|e| e.as_int()), Some(1));
    }
}
