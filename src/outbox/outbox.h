/*-------------------------------------------------------------------------
 *
 * outbox.h
 *	  The outbox: what the rest of dedup calls of it.  The module
 *	  entry has it define its settings and tells the claims to report each
 *	  successful claim to it (origin.c); the sweeper has it delete sent
 *	  messages, a batch at a time (maintain.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef DEDUP_OUTBOX_H
#define DEDUP_OUTBOX_H

#include "claim/claim.h"
#include "datatype/timestamp.h"


/* the id of a message, as text: a UUID */
#define DEDUP_OUTBOX_ID_LEN		36

/* the longest destination and relay name, and the longest key, in bytes */
#define DEDUP_OUTBOX_MAX_NAME_BYTES	255
#define DEDUP_OUTBOX_MAX_KEY_BYTES	1024

/* a header's longest name, and the most the headers may take, in bytes */
#define DEDUP_OUTBOX_MAX_HEADER_NAME_BYTES	255
#define DEDUP_OUTBOX_MAX_HEADERS_BYTES		2048

/* the key that signs the messages of WAL mode, in bytes */
#define DEDUP_OUTBOX_SIGNING_KEY_BYTES	32

/* settings (maintain.c) */
extern int	dedup_outbox_retention_s;
extern int	dedup_outbox_max_payload;
extern int	dedup_outbox_max_attempts;
extern void dedup_outbox_define_gucs(void);

/* origin.c: the claim the transaction's messages are derived from */
extern void dedup_outbox_note_claim(const DedupClaimOrigin *claim);
extern void dedup_outbox_next_id(const char *destination, int destination_len,
								 char *id);

/* publish.c */
extern void dedup_outbox_check_name(const char *function, const char *argname,
									Datum value, bool isnull, Size max_bytes);

/* maintain.c: one batch of the retention worker's step */
extern int64 dedup_outbox_sweep_batch(void);

#endif							/* DEDUP_OUTBOX_H */
