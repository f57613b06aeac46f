/*
 * DedupConsumer.java: a message consumer on JDBC (pgjdbc) that applies each
 * message at most once, with dedup.
 *
 * For each message it runs one transaction: dedup.dedup_claim(consumer,
 * message id), and only when that returns true the business update; then it
 * commits, and only then would it acknowledge the message to the broker.  A
 * duplicate (false) is committed and acknowledged without doing the work.
 * A serialization failure or deadlock (SQLSTATE class 40) is retried; any
 * other error rolls the transaction back and ends the program (exit code 1,
 * the error and its SQLSTATE on standard error), so the message's
 * redelivery claims it again.
 *
 * The broker is stood in for by standard input, one message a line:
 * "message_id account amount".  Output, one line each: "ready" once
 * connected, then "claimed <id>" or "duplicate <id>" per message.
 *
 *   java -cp /usr/share/java/postgresql.jar doc/examples/jdbc/DedupConsumer.java \
 *     'jdbc:postgresql://127.0.0.1:6432/bank?user=app&prepareThreshold=0' \
 *     loyalty-service < messages.txt
 *
 * It works on a table public.accounts (id int PRIMARY KEY, balance bigint),
 * and calls everything schema-qualified, as a transaction-mode pooler needs
 * (doc/use.md, "Java (JDBC)" and "Through a connection pooler").  test/t/043_jdbc.pl runs it.
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;

public final class DedupConsumer
{
	private static final String CLAIM = "SELECT dedup.dedup_claim(?, ?)";
	private static final String APPLY =
		"UPDATE public.accounts SET balance = balance + ? WHERE id = ?";

	private final Connection conn;
	private final PreparedStatement claim;
	private final PreparedStatement apply;
	private final String consumer;

	private DedupConsumer(Connection conn, String consumer) throws SQLException
	{
		this.conn = conn;
		this.consumer = consumer;
		conn.setAutoCommit(false);
		claim = conn.prepareStatement(CLAIM);
		apply = conn.prepareStatement(APPLY);
	}

	/* One message, one transaction: true if it was applied now. */
	private boolean handle(String messageId, int account, long amount) throws SQLException
	{
		for (;;)
		{
			try
			{
				boolean isNew;

				claim.setString(1, consumer);
				claim.setString(2, messageId);
				try (ResultSet rs = claim.executeQuery())
				{
					rs.next();
					isNew = rs.getBoolean(1);
				}
				if (isNew)
				{
					apply.setLong(1, amount);
					apply.setInt(2, account);
					apply.executeUpdate();
				}
				conn.commit();
				return isNew;
			}
			catch (SQLException e)
			{
				String state = e.getSQLState();

				try
				{
					conn.rollback();
				}
				catch (SQLException r)
				{
					e.addSuppressed(r);
					throw e;
				}
				if (state == null || !state.startsWith("40"))
					throw e;
				/* 40001, 40P01: nothing was kept, run the transaction again */
			}
		}
	}

	public static void main(String[] args) throws Exception
	{
		if (args.length != 2)
		{
			System.err.println("usage: DedupConsumer JDBC_URL CONSUMER < messages");
			System.exit(2);
		}
		try (Connection conn = DriverManager.getConnection(args[0]);
			 BufferedReader in = new BufferedReader(
				 new InputStreamReader(System.in, StandardCharsets.UTF_8)))
		{
			DedupConsumer c = new DedupConsumer(conn, args[1]);
			String line;

			System.out.println("ready");
			System.out.flush();
			while ((line = in.readLine()) != null)
			{
				String[] f = line.trim().split("\\s+");

				if (f.length != 3)
					throw new IllegalArgumentException("bad message: " + line);
				boolean applied = c.handle(f[0], Integer.parseInt(f[1]), Long.parseLong(f[2]));

				/* acknowledge the message to the broker here, after the commit */
				System.out.println((applied ? "claimed " : "duplicate ") + f[0]);
			}
		}
		catch (SQLException e)
		{
			System.err.println("DedupConsumer: " + e.getMessage() + " (SQLSTATE " + e.getSQLState() + ")");
			System.exit(1);
		}
	}
}
