;;; emacs_fix.el --- End-to-end in a real headless Emacs with eglot  -*- lexical-binding: t; -*-
;;; Commentary:
;; The real agent-ls under eglot 1.9 (Debian's elpa-eglot), with agent-ls.el (SCENARIO
;; "plugin") or with eglot alone ("eglot"): fix, undo, redo, checking after each that the
;; buffer and the disk agree, and recording every question Emacs asks.  Results go to
;; $RESULT as JSON lines, written at once so a stuck scenario still shows how far it got.
;;; Code:

(require 'json)
;; Debian's elpa-eglot installs under site-lisp/elpa, which -Q leaves out of load-path.
(dolist (dir (file-expand-wildcards "/usr/share/emacs/site-lisp/elpa/*"))
  (add-to-list 'load-path dir))
(require 'cl-lib)
(setq debug-on-error nil
      make-backup-files nil
      create-lockfiles nil
      auto-save-default nil
      eglot-send-changes-idle-time 0.1
      eglot-sync-connect t)

(defvar et-ws (getenv "WORKSPACE"))
(defvar scenario (getenv "SCENARIO"))
(defvar result-file (getenv "RESULT"))
(defvar questions nil "Every question Emacs asked, newest first.")
(defvar messages nil "Every message shown, newest first.")

(defun et-record (name ok &optional detail)
  (with-temp-buffer
    (insert (json-encode `((name . ,name) (ok . ,(if ok t :json-false))
                           (detail . ,(format "%s" (or detail ""))))) "\n")
    (append-to-file (point-min) (point-max) result-file)))

(defun wait-until (pred &optional seconds)
  "Runs the process loop until PRED holds or SECONDS pass; PRED's last value."
  (let ((deadline (+ (float-time) (or seconds 30))) value)
    (while (and (not (setq value (funcall pred))) (< (float-time) deadline))
      (accept-process-output nil 0.05)
      ;; A batch Emacs is never idle, so eglot's idle timer that sends the pending didChange
      ;; never fires: it is run here, as an idle interactive Emacs would.
      (dolist (b (buffer-list))
        (with-current-buffer b
          (when (and (bound-and-true-p eglot--managed-mode) eglot--recent-changes)
            (eglot--signal-textDocument/didChange)))))
    value))

(defun disk-text (file)
  (with-temp-buffer (insert-file-contents file) (buffer-string)))

;; Every question is recorded. The "changed on disk" ones (`find-file-noselect' and a save
;; over a file changed behind Emacs) are answered yes, as a user who wants the agent's change
;; would; eglot's own "Server wants to edit" is answered y.
(defun answer-yes (prompt &rest _)
  (let ((q (substring-no-properties (format "%s" prompt))))
    (push q questions)
    ;; Scenario "eglot-no": the user keeps their buffer when Emacs says the file changed;
    ;; "declined": the user answers no to eglot's "Proceed?" for the run's change.
    (not (or (and (equal scenario "eglot-no")
                  (string-match-p "changed on disk\\|changed since visited" q))
             (and (equal scenario "declined") (string-match-p "Proceed" q))))))
(advice-add 'yes-or-no-p :override #'answer-yes)
(advice-add 'y-or-n-p :override #'answer-yes)
(advice-add 'ask-user-about-supersession-threat :override
            (lambda (fn) (push (format "supersession: %s" fn) questions)))
(advice-add 'message :before
            (lambda (fmt &rest args)
              (when fmt (push (apply #'format-message fmt args) messages))))

(defun on-disk-changed-question ()
  (cl-find-if (lambda (q) (string-match-p "changed on disk\\|changed since visited\\|supersession" q))
              questions))

(defun in-step (file buf what)
  "Records that BUF and FILE both hold WHAT, with the buffer saved."
  (let ((disk (disk-text file))
        (text (with-current-buffer buf (buffer-string))))
    (et-record (format "buffer holds %s" what) (string-match-p (regexp-quote what) text) text)
    (et-record (format "disk holds %s" what) (string-match-p (regexp-quote what) disk) disk)
    (et-record "buffer and disk agree" (equal text disk) (format "buffer:\n%s\ndisk:\n%s" text disk))))

(defvar et-settings
  `(:model (:provider "replay" :replay_file ,(concat et-ws "/.replay.jsonl"))
           :agent (:approval ,(if (member scenario (quote ("plugin" "review"))) "prompt" "auto"))))

(defun et-start (class)
  (let* ((file (concat et-ws "/calc.py"))
         (buf (find-file-noselect file)))
    (with-current-buffer buf
      (python-mode)
      (let ((project (eglot--current-project)))
        (eglot '(python-mode) project class
               (append (list (getenv "AGENT_LS") "serve")
                       (unless (eq class 'agent-ls-server)
                         (list :initializationOptions et-settings)))
               "python")))
    (et-record "eglot manages calc.py"
            (wait-until (lambda () (with-current-buffer buf (and eglot--managed-mode (eglot-current-server)))) 20))
    (list file buf)))

(defun plugin-scenario ()
  (add-to-list 'load-path (getenv "PLUGIN"))
  (require 'agent-ls)
  (setq agent-ls-command (list (getenv "AGENT_LS") "serve")
        agent-ls-settings et-settings)
  (agent-ls-setup)
  (let* ((asked nil) (finished nil)
         (agent-ls-ask-function (lambda (msg titles) (push msg asked)
                                  (if (member "Accept" titles) "Accept" (car titles)))))
    (add-hook 'agent-ls-run-finished-hook (lambda (o) (setq finished o)))
    (cl-destructuring-bind (file buf) (et-start 'agent-ls-server)
      (with-current-buffer buf (agent-ls-fix))
      (et-record "the run finishes" (wait-until (lambda () finished) 60))
      (et-record "status done" (equal (plist-get finished :status) "done") finished)
      (et-record "one question for the change" (= (length asked) 1) asked)
      (et-record "the question names the file" (string-match-p "calc.py" (or (car asked) "")) asked)
      (et-record "the mode line shows the tests" (string-match-p "tests: passed"
                                                              (agent-ls-mode-line))
              (agent-ls-mode-line))
      (in-step file buf "return a + b")
      (et-record "buffer saved" (not (buffer-modified-p buf)))
      (with-current-buffer buf (agent-ls-undo))
      (et-record "undo lands" (wait-until (lambda () (and (string-match-p "return a - b" (disk-text file))
                                                       (with-current-buffer buf
                                                         (string-match-p "return a - b" (buffer-string)))))
                                       20)
              (car messages))
      (in-step file buf "return a - b")
      (et-record "buffer saved after undo" (not (buffer-modified-p buf)))
      ;; The undo's run event names the step's run, which ended: no run is going on.
      (et-record "the mode line shows the tests after an undo"
                 (and (string-match-p "tests:" (agent-ls-mode-line))
                      (not (string-match-p "agent:" (agent-ls-mode-line))))
                 (agent-ls-mode-line))
      (with-current-buffer buf (agent-ls-redo))
      (et-record "redo lands" (wait-until (lambda () (and (string-match-p (regexp-quote "return a + b") (disk-text file))
                                                       (with-current-buffer buf
                                                         (string-match-p (regexp-quote "return a + b") (buffer-string)))))
                                       20)
              (car messages))
      (in-step file buf "return a + b")
      (et-record "buffer saved after redo" (not (buffer-modified-p buf)))
      (let (status)
        (with-current-buffer buf (agent-ls-status (lambda (s) (setq status s))))
        (et-record "status lists the step" (wait-until (lambda () (and status (> (length (plist-get status :steps)) 0))) 10)
                status))
      (with-current-buffer buf (save-buffer))
      (et-record "no changed-on-disk question, even on save" (not (on-disk-changed-question)) questions)
      ;; M-x agent-ls-rewind reaches the server's agent-ls.rewind with its step and goal: a
      ;; step that does not exist is refused by the runtime, by number.
      (with-current-buffer buf (agent-ls-rewind 999 "instead, multiply"))
      (et-record "rewind reaches the server"
                 (wait-until (lambda () (cl-find-if (lambda (m) (string-match-p "no applied step 999 to rewind to" m))
                                                    messages))
                             20)
                 messages))))

(defun et-start-command (server command)
  "Sends COMMAND without waiting for its answer.
Emacs 28's jsonrpc drops out of its process filter with a throw when the answer to a
synchronous `jsonrpc-request' arrives, leaving a server request read in the same chunk (the
undo's workspace/applyEdit) unhandled until more output comes; a user's M-x would meet that
too, but it is Emacs's bug, not the one under test."
  (jsonrpc-async-request server :workspace/executeCommand
                         (list :command command :arguments [])
                         :success-fn #'ignore
                         :error-fn (lambda (e) (et-record (format "%s answers" command) nil e))))

(defun check-diff-buffer ()
  "Records that the diff the server sent for Show diff is in a diff-mode buffer."
  (let* ((diff (get-buffer "*agent-ls diff*"))
         (text (and diff (with-current-buffer diff (buffer-string)))))
    (et-record "Show diff opens the change in diff-mode"
               (and diff (eq (buffer-local-value 'major-mode diff) 'diff-mode)
                    (string-match-p (regexp-quote "+    return a + b") text))
               text)))

(defun review-scenario ()
  "The review question: Show diff opens the diff, Reject leaves everything as it was; then
the tests rerun, the mode line follows, and the runs buffer tells what happened."
  (add-to-list 'load-path (getenv "PLUGIN"))
  (require 'agent-ls)
  (setq agent-ls-command (list (getenv "AGENT_LS") "serve")
        agent-ls-settings et-settings)
  (agent-ls-setup)
  (let* ((asked 0) (finished nil) (mode-lines nil)
         (agent-ls-ask-function
          (lambda (_msg titles)
            (setq asked (1+ asked))
            (push (agent-ls-mode-line) mode-lines)
            (cond ((= asked 1) (car (member "Show diff" titles)))
                  (t (check-diff-buffer) "Reject")))))
    (add-hook 'agent-ls-run-finished-hook (lambda (o) (setq finished o)))
    (cl-destructuring-bind (file buf) (et-start 'agent-ls-server)
      ;; The user's path through eglot's code actions: the fix action is the only one of its
      ;; kind, so eglot runs it without a menu, through agent-ls.el's eglot-execute-command.
      (with-current-buffer buf
        (let ((last-nonmenu-event ?a))
          (eglot-code-actions (point-min) nil "source.agent-ls.fixTests" t)))
      (et-record "the run finishes" (wait-until (lambda () finished) 60))
      (et-record "the question came back after the diff" (= asked 2) asked)
      (et-record "the mode line showed the run at the question"
                 (cl-every (lambda (m) (string-match-p "agent: fix the failing tests" m)) mode-lines)
                 mode-lines)
      (et-record "the mode line is idle after the run" (not (string-match-p "agent:" (agent-ls-mode-line)))
                 (agent-ls-mode-line))
      (in-step file buf "return a - b")
      (setq agent-ls--tests nil)
      (with-current-buffer buf (agent-ls-rerun))
      (et-record "rerun: the mode line says the tests failed"
                 (wait-until (lambda () (string-match-p "tests: failed" (agent-ls-mode-line))) 30)
                 (agent-ls-mode-line))
      (with-current-buffer buf (agent-ls-runs))
      (let ((runs (with-current-buffer "*agent-ls runs*" (buffer-string))))
        (et-record "the runs buffer shows the proposal and its rejection"
                   (and (string-match-p "agent patch" runs) (string-match-p "user approval" runs))
                   runs))
      (et-record "no question from Emacs itself" (null questions) questions))))


(defun et-exec (server command &optional arguments)
  (jsonrpc-request server :workspace/executeCommand
                   (list :command command :arguments (or arguments []))))

(defun eglot-scenario ()
  (cl-destructuring-bind (file buf) (et-start 'eglot-lsp-server)
    (let ((server (with-current-buffer buf (eglot-current-server)))
          (last-status (lambda (server)
                         (plist-get (plist-get (et-exec server "agent-ls.status") :last) :status))))
      (et-start-command server "agent-ls.fixTests")
      (et-record "the run finishes" (wait-until (lambda () (funcall last-status server)) 60))
      (et-record "status done" (equal (funcall last-status server) "done"))
      (et-record "one question for the change (eglot's)" (= (length questions) 1) questions)
      (in-step file buf "return a + b")
      (setq questions nil)
      (et-start-command server "agent-ls.undo")
      (et-record "undo lands" (wait-until (lambda () (and (cl-find-if (lambda (m) (string-match-p "undid step\\|could not undo" m)) messages)
                                                       (string-match-p "return a - b" (disk-text file))
                                                       (with-current-buffer buf
                                                         (string-match-p "return a - b" (buffer-string)))))
                                       20)
              (format "%S %S" questions (cl-subseq messages 0 (min 5 (length messages)))))
      (in-step file buf "return a - b")
      (setq questions nil)
      (et-start-command server "agent-ls.redo")
      (et-record "redo lands" (wait-until (lambda () (and (cl-find-if (lambda (m) (string-match-p "redid step\\|could not redo" m)) messages)
                                                       (string-match-p (regexp-quote "return a + b") (disk-text file))
                                                       (with-current-buffer buf
                                                         (string-match-p (regexp-quote "return a + b") (buffer-string)))))
                                       20)
              (format "%S" questions))
      (in-step file buf "return a + b")
      ;; With "eglot-no" the buffer kept its old idea of the file, so Emacs asks again before
      ;; saving; answered no, the disk already holds the same text.
      (condition-case nil (with-current-buffer buf (save-buffer)) (error nil))
      (et-record "save after redo keeps the agent's text" (string-match-p "return a \\+ b" (disk-text file))))))

(defvar et-pick nil "The title of the menu item to pick, else the default, as RET takes it.")

(defun et-answer-menus ()
  "Answers every menu (eglot's code-action menu) as a user would, recording it."
  (advice-add 'completing-read :around
              (lambda (_fn prompt collection &rest rest)
                (push (substring-no-properties (format "%s" prompt)) questions)
                (let* ((c (if (functionp collection) (all-completions "" collection) collection))
                       (titles (mapcar (lambda (x) (if (consp x) (car x) x)) c))
                       (def (nth 4 rest)))
                  (cond (et-pick (car (member et-pick titles)))
                        ((stringp def) def)
                        (t (car titles)))))))

(defun et-menu-p (q) (string-match-p "Pick an action" q))

(defun user-scenario ()
  "eglot alone, as a new user meets it with the default settings: the fix through eglot's
code-action menu, then undo and redo ten times each through a synchronous request, as M-x
does.  Every question is counted: the menu, eglot's own, the server's."
  (et-answer-menus)
  (setq et-settings `(:model (:provider "replay" :replay_file ,(concat et-ws "/.replay.jsonl"))))
  (cl-destructuring-bind (file buf) (et-start 'eglot-lsp-server)
    (let ((server (with-current-buffer buf (eglot-current-server)))
          (last-status (lambda (server)
                         (plist-get (plist-get (et-exec server "agent-ls.status") :last) :status))))
      (with-current-buffer buf
        (let ((last-nonmenu-event ?a))
          (eglot-code-actions (point-min) (point-min) nil t)))
      (et-record "the run finishes" (wait-until (lambda () (funcall last-status server)) 60))
      (et-record "status done" (equal (funcall last-status server) "done"))
      ;; In a git repository the commit is offered after the run ends: wait for it (a notice,
      ;; or a question, which would be a third), then count.
      (et-record "the commit is offered as a notice, not asked"
                 (and (wait-until (lambda ()
                                    (or (cl-find-if (lambda (m) (string-match-p "not committed" m)) messages)
                                        (cl-find-if (lambda (q) (string-match-p "commit" q)) questions)))
                                  10)
                      (not (cl-find-if (lambda (q) (string-match-p "commit" q)) questions)))
                 (format "%S %S" questions messages))
      (et-record "at most 2 questions for the fix (the action, the change)"
                 (<= (length questions) 2) questions)
      (in-step file buf "return a + b")
      (dotimes (i 10)
        (dolist (move '(("agent-ls.undo" "undid step" "return a - b")
                        ("agent-ls.redo" "redid step" "return a + b")))
          (cl-destructuring-bind (command said text) move
            (setq questions nil messages nil)
            (et-exec server command)
            (et-record (format "%s %d lands within 10 s" command (1+ i))
                       (wait-until (lambda ()
                                     (and (cl-find-if (lambda (m) (string-match-p said m)) messages)
                                          (string-match-p (regexp-quote text) (disk-text file))
                                          (with-current-buffer buf
                                            (string-match-p (regexp-quote text) (buffer-string)))))
                                   10)
                       (format "%S %S" questions messages))
            ;; Every question counts, Emacs's own "changed on disk" too: the server writes the
            ;; file under the buffer (tests run on the disk, and eglot saves nothing), but
            ;; parks it as Emacs last saw it while the edit is applied.
            (et-record (format "%s %d: at most 1 question" command (1+ i))
                       (<= (length questions) 1)
                       questions)
            (et-record (format "%s %d: no changed-on-disk question" command (1+ i))
                       (not (on-disk-changed-question))
                       questions)))))))

;;; Scenario "iterations": eglot alone, a fix that takes two iterations and whose review finds
;;; something, then Agent: Undo from eglot's code actions, then a save.

(defun et-actions (buf)
  "The titles of the code actions eglot gets at the start of BUF."
  (with-current-buffer buf
    (mapcar (lambda (a) (plist-get a :title)) (eglot-code-actions (point-min) (point-min) nil nil))))

(defun et-two-iterations-replay ()
  "A fix that takes two iterations, whose review has a P2 finding."
  (with-temp-file (concat et-ws "/.replay.jsonl")
    (dolist (l (list `((role . "coder") (content . ,(et-edit "a - b" "a - b + 0")))
                     '((role . "reflector")
                       (content . "{\"task_id\": \"T1\", \"passed\": false, \"report\": \"still wrong\", \"next_step\": \"add\"}"))
                     `((role . "coder") (content . ,(et-edit "a - b + 0" "a + b")))
                     `((role . "reviewer")
                       (content . ,(json-encode
                                    '((findings . [((title . "[P2] no test for negative numbers")
                                                    (body . "add(-1, 1)") (priority . 2) (confidence . 0.8)
                                                    (path . "calc.py") (start_line . 5) (end_line . 5))])
                                      (verdict . "correct") (explanation . "adds") (confidence . 0.9)))))))
      (insert (json-encode l) "\n"))))

(defun declined-scenario ()
  "eglot alone: the user answers no to the run's one edit: the files are as before the run."
  (et-two-iterations-replay)
  (et-answer-menus)
  (setq et-settings `(:model (:provider "replay" :replay_file ,(concat et-ws "/.replay.jsonl"))))
  (cl-destructuring-bind (file buf) (et-start 'eglot-lsp-server)
    (let* ((server (with-current-buffer buf (eglot-current-server)))
           (before (disk-text file))
           (last (lambda () (plist-get (et-exec server "agent-ls.status") :last))))
      (with-current-buffer buf
        (let ((last-nonmenu-event ?a))
          (eglot-code-actions (point-min) (point-min) nil t)))
      (et-record "the run finishes" (wait-until (lambda () (plist-get (funcall last) :status)) 60))
      (et-record "eglot asked once for the run's change"
                 (= 1 (cl-count-if (lambda (q) (string-match-p "Proceed" q)) questions)) questions)
      (et-record "declining is the review's decision to roll back"
                 (equal (plist-get (funcall last) :decision) "rolled_back") (funcall last))
      (et-record "the declined run changed no file"
                 (equal (plist-get (funcall last) :files_changed) []) (funcall last))
      (et-record "the buffer is as before the run"
                 (and (equal (with-current-buffer buf (buffer-string)) before)
                      (not (buffer-modified-p buf))))
      (et-record "the disk is as before the run" (equal (disk-text file) before) (disk-text file))
      (setq questions nil)
      (with-current-buffer buf (set-buffer-modified-p t) (save-buffer))
      (et-record "saving asks nothing" (null questions) questions))))

(defun iterations-scenario ()
  (et-two-iterations-replay)
  (et-answer-menus)
  (setq et-settings `(:model (:provider "replay" :replay_file ,(concat et-ws "/.replay.jsonl"))))
  (cl-destructuring-bind (file buf) (et-start 'eglot-lsp-server)
    (let* ((server (with-current-buffer buf (eglot-current-server)))
           (last (lambda () (plist-get (et-exec server "agent-ls.status") :last))))
      (with-current-buffer buf
        (let ((last-nonmenu-event ?a))
          (eglot-code-actions (point-min) (point-min) nil t)))
      (et-record "the run finishes" (wait-until (lambda () (plist-get (funcall last) :status)) 60))
      (et-record "status done after two iterations"
                 (and (equal (plist-get (funcall last) :status) "done")
                      (equal (plist-get (funcall last) :iterations) 2))
                 (funcall last))
      (wait-until (lambda () (cl-find-if (lambda (m) (string-match-p "not committed" m)) messages)) 10)
      (et-record "at most 2 questions for a fix of two iterations with a finding"
                 (<= (length questions) 2) questions)
      (et-record "eglot's confirmation is the review's decision"
                 (equal (plist-get (funcall last) :decision) "kept") (funcall last))
      (et-record "the review's finding is said"
                 (cl-find-if (lambda (m) (string-match-p "no test for negative numbers" m)) messages)
                 messages)
      (let ((notice (cl-find-if (lambda (m) (string-match-p "not committed" m)) messages)))
        (et-record "the notice names what eglot has"
                   (and notice (string-match-p "eglot-code-actions" notice)
                        (not (string-match-p "eglot-execute-command" notice)))
                   notice))
      (in-step file buf "return a + b")
      (let ((titles (et-actions buf)))
        (et-record "Agent: Undo and Agent: Commit are code actions"
                   (and (member "Agent: Undo" titles) (member "Agent: Commit" titles))
                   titles))
      (setq questions nil messages nil)
      (let ((et-pick "Agent: Undo"))
        (with-current-buffer buf
          (let ((last-nonmenu-event ?a))
            (eglot-code-actions (point-min) (point-min) nil t))))
      (et-record "Agent: Undo lands"
                 (wait-until (lambda ()
                               (and (cl-find-if (lambda (m) (string-match-p "undid step" m)) messages)
                                    (string-match-p "return a - b" (disk-text file))
                                    (with-current-buffer buf
                                      (string-match-p "return a - b" (buffer-string)))))
                             20)
                 (format "%S %S" questions messages))
      (et-record "Agent: Undo: one question besides the menu"
                 (<= (length (cl-remove-if #'et-menu-p questions)) 1) questions)
      (in-step file buf "return a - b")
      (setq questions nil)
      (with-current-buffer buf (save-buffer))
      (et-record "saving right after the undo asks nothing" (null questions) questions)
      (et-record "the saved file holds the undo" (string-match-p "return a - b" (disk-text file))))))

;;; Scenario "diagnostics": flymake's diagnostics from a backend of the test's own (a second
;;; checker beside agent-ls's eglot) check the agent's edits; agent-ls starts no server.

(defun et-edit (from to)
  (format "calc.py\n<<<<<<< SEARCH\n    return %s\n=======\n    return %s\n>>>>>>> REPLACE\n" from to))

(defun et-undefined-c (report-fn &rest _)
  "A flymake backend: \"c\" is not defined wherever a line ends in `+ c'."
  (let (diags)
    (save-excursion
      (goto-char (point-min))
      (while (re-search-forward "+ \\(c\\)$" nil t)
        (push (flymake-make-diagnostic (current-buffer) (match-beginning 1) (match-end 1)
                                       :error "\"c\" is not defined")
              diags)))
    (funcall report-fn diags)))

(defvar-local et--flymake-tick nil)
(defun et-flymake-tick ()
  "Starts flymake in each buffer that changed since: its idle timer never fires in batch."
  (dolist (b (buffer-list))
    (with-current-buffer b
      (when (and (bound-and-true-p flymake-mode) (not (eql et--flymake-tick (buffer-modified-tick))))
        (setq et--flymake-tick (buffer-modified-tick))
        (flymake-start)))))

(defun et-journal ()
  "The run's journal lines (alists), in order."
  (let (lines)
    (dolist (f (file-expand-wildcards (concat et-ws "/.agent-ls/runs/*.jsonl")))
      (with-temp-buffer
        (insert-file-contents f)
        (dolist (l (split-string (buffer-string) "\n" t))
          (push (let ((json-object-type 'alist) (json-array-type 'list) (json-false nil))
                  (json-read-from-string l))
                lines))))
    (nreverse lines)))

(defun diagnostics-scenario ()
  (with-temp-file (concat et-ws "/.replay.jsonl")
    (dolist (e (list (et-edit "a - b" "a + c") (et-edit "a + c" "a + b")))
      (insert (json-encode `((role . "coder") (content . ,e))) "\n")))
  (add-to-list 'load-path (getenv "PLUGIN"))
  (require 'agent-ls)
  (let ((spawned (concat et-ws "/spawned")))
    (setq agent-ls-command (list (getenv "AGENT_LS") "serve")
          agent-ls-settings
          `(:model (:provider "replay" :replay_file ,(concat et-ws "/.replay.jsonl"))
                   :agent (:approval "prompt" :evaluate :json-false :review "off")
                   :lsp_servers (:wait_ms 60000
                                 :servers (:python (:command ["python3" "-c" ,(format "open(%S, 'w')" spawned)]
                                                    :patterns ["*.py"])))))
    (agent-ls-setup)
    (let* ((finished nil)
           (agent-ls-ask-function (lambda (_msg titles) (if (member "Accept" titles) "Accept" (car titles)))))
      (add-hook 'agent-ls-run-finished-hook (lambda (o) (setq finished o)))
      (cl-destructuring-bind (file buf) (et-start 'agent-ls-server)
        (with-current-buffer buf
          (remove-hook 'flymake-diagnostic-functions #'python-flymake t)
          (add-hook 'flymake-diagnostic-functions #'et-undefined-c nil t)
          (flymake-mode 1))
        (et-record "flymake's diagnostics are forwarded"
                   (wait-until (lambda () (et-flymake-tick) (buffer-local-value 'agent-ls--forwarded buf)) 10))
        (with-current-buffer buf (agent-ls-fix))
        (et-record "the run finishes" (wait-until (lambda () (et-flymake-tick) finished) 120))
        (et-record "status done" (equal (plist-get finished :status) "done") finished)
        (let* ((lines (et-journal))
               (checks (cl-remove-if-not (lambda (l) (and (equal (alist-get 'type l) "diagnostics")
                                                          (not (alist-get 'before_edit (alist-get 'data l)))))
                                         lines))
               (first (alist-get 'errors (alist-get 'data (car checks))))
               (order (delq nil (mapcar (lambda (l) (car (member (alist-get 'type l) '("test_result" "diagnostics"))))
                                        lines)))
               (at (cl-position "diagnostics" order :test #'equal)))
          (et-record "the bad edit came back with flymake's error"
                     (and (>= (length checks) 2) (= (length first) 1)
                          (string-match-p "^calc.py:5:.*\"c\" is not defined" (car first)))
                     checks)
          (et-record "the fixing edit has no new error"
                     (null (alist-get 'errors (alist-get 'data (car (last checks))))) checks)
          (et-record "no test ran between the bad edit and its fix"
                     (and at (equal (nth (1+ at) order) "diagnostics")) order))
        (et-record "calc.py holds the fix" (string-match-p (regexp-quote "return a + b") (disk-text file)))
        (et-record "agent-ls started no language server of its own" (not (file-exists-p spawned)))))))

(defun dump-events ()
  "The eglot events buffers, for a failing scenario's report."
  (when (getenv "EVENTS")
    (dolist (b (buffer-list))
      (when (string-match-p "EGLOT.*events" (buffer-name b))
        (with-current-buffer b (append-to-file (point-min) (point-max) (getenv "EVENTS")))))))

(condition-case err
    (progn
      (require 'eglot)
      (pcase scenario
        ("plugin" (plugin-scenario))
        ("review" (review-scenario))
        ("user" (user-scenario))
        ("iterations" (iterations-scenario))
        ("declined" (declined-scenario))
        ("diagnostics" (diagnostics-scenario))
        (_ (eglot-scenario))))
  (error (et-record "the scenario ran without an error" nil (error-message-string err))))
(dump-events)
(kill-emacs 0)
;;; emacs_fix.el ends here
